"""Write the bench's 500 Bible dev verses as source ids (as `transduce bench engines` encodes them) to ids.json."""

import json
import sys
from pathlib import Path

from transduce.bench.engines import source_sentences
from transduce.model.checkpoint import load_checkpoint
from transduce.shipped import default_checkpoint

work = Path(sys.argv[1] if len(sys.argv) > 1 else "/tmp/g26/bench-work")
tok = load_checkpoint(default_checkpoint()).tokenizer()
ids = [tok.encode_source(s, "de") for s in source_sentences(500, work)]
Path("/tmp/g26/ids.json").write_text(json.dumps(ids))
print(len(ids))
