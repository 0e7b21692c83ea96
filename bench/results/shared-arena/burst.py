import json, sys, urllib.request, concurrent.futures as cf
from transduce.bench.engines import source_sentences
from pathlib import Path
port = sys.argv[1]
s = source_sentences(200, Path('/tmp/g25/work'))
def go(chunk):
    req = urllib.request.Request(f'http://localhost:{port}/translate', data=json.dumps({'q': chunk, 'source': 'en', 'target': 'de', 'beam_size': 4}).encode(), headers={'content-type': 'application/json'})
    return urllib.request.urlopen(req, timeout=60).status
with cf.ThreadPoolExecutor(8) as ex:
    print(list(ex.map(go, [s[i:i+25] for i in range(0, 200, 25)])))
