"""What reads studies: the query API behind the pages and the CLI (:mod:`workers.query.api`)."""
