# Developer tool: regenerates template_goldens.json.
# Usage: python3 generate_goldens.py tests/data template_goldens.json
# For every template in tests/data/chat_templates/templates: render the conversation shapes of the
# expected files with Jinja2 configured as transformers does (tools/documents None when absent).
import json, glob, os, sys
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_reference as ref
data = sys.argv[1]
cases = json.load(open(os.path.join(data, 'chat_templates/expected/Qwen-Qwen3-0.6B.json')))['cases']
out = {}
for f in sorted(glob.glob(os.path.join(data, 'chat_templates/templates/*.jinja'))):
    src = open(f).read()
    results = []
    for c in cases:
        v = dict(c['vars']); v['bos_token'] = '<s>'; v['eos_token'] = '</s>'
        v.setdefault('tools', None); v.setdefault('documents', None)
        try:
            results.append({'case': c['case'], 'expected': ref.compile(src).render(**v)})
        except Exception as e:
            results.append({'case': c['case'], 'error': str(e)})
    out[os.path.basename(f)] = results
json.dump({'conversations': {c['case']: {k: v for k, v in c['vars'].items() if k not in ('bos_token', 'eos_token')} for c in cases}, 'templates': out}, open(sys.argv[2], 'w'), indent=1, ensure_ascii=False)
