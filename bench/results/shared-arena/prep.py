import json, pickle
from pathlib import Path
from transduce.bench.engines import source_sentences
from transduce.engine.translator import Translator
t = Translator('/root/.cache/transduce/default-onnx', device='cpu')
sents = source_sentences(500, Path('/tmp/g25/work'))
tok = t.tokenizer if hasattr(t, 'tokenizer') else None
srcs = [tok.encode_source(s, 'de') for s in sents]
pickle.dump(srcs, open('/tmp/g25/srcs.pkl', 'wb'))
print(len(srcs), srcs[0])
