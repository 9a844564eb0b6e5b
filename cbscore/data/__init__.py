"""Corpus sources -> tokenizer -> token store -> batches.

```python
store = prepare(DataConfig())                     # built-in corpus, 8192-token BPE; idempotent
stream = store.train_stream(context_tokens=512, seed=0)
x = stream.batch(step, batch_size)                # int64 (batch_size, 513), pure in (seed, step, B)
val = store.val_windows(512, max_windows=64)      # int64 (64, 513), fixed held-out windows
```
See ``store`` (layout, atomic builds, locking), ``stream`` (the window order), ``sources``
(built-in corpus, local files, hub) and ``tokenizer``.
"""

from .config import DataConfig
from .store import TokenStore, open_store, prepare
from .stream import WindowStream

__all__ = ["DataConfig", "TokenStore", "WindowStream", "open_store", "prepare"]
