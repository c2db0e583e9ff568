# Developer tool: regenerates language_cases.json from the rows below, rendering each with
# Jinja2 as transformers configures it. Usage: python3 generate_language_cases.py language_cases.json
import json, os, sys
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_reference as ref

CASES = [
 # whitespace control, trim_blocks, lstrip_blocks
 ("trim_blocks_eats_newline", "{% if true %}\nA\n{% endif %}\nB", {}),
 ("lstrip_blocks_strips_indent", "x\n    {% if true %}\n    y\n    {% endif %}\nz", {}),
 ("lstrip_not_for_print", "  {{ 'v' }}  {% if true %}z{% endif %}", {}),
 ("minus_strips_both_sides", "a  \n  {%- if true -%}  \n  b  \n  {%- endif -%}  \n  c", {}),
 ("minus_in_print", "a \n {{- 'b' -}} \n c", {}),
 ("plus_disables_lstrip_and_trim", "  {%+ if true +%}\nA{% endif %}", {}),
 ("comment_trim_and_lstrip", "a\n  {# note #}\nb{#- x -#}   c", {}),
 ("raw_block", "{% raw %}{{ not evaluated }}{% if %}{% endraw %}!", {}),
 ("text_only_keeps_whitespace", "  line1\n\n  line2  \n", {}),
 ("crlf_trim_only_lf", "{% if true %}\r\nA{% endif %}", {}),
 # expressions and literals
 ("int_float_repr", "{{ 1 }} {{ 1.0 }} {{ 1e20 }} {{ 1/3 }} {{ 10/2 }} {{ 0.1+0.2 }} {{ 1e-5 }} {{ -0.0 }} {{ 1_000 }} {{ 0x1F }}", {}),
 ("python_repr_of_containers", "{{ [1, 'a', none, true, 1.5] }} {{ {'k': [1, (2,)], 2: 'x'} }} {{ (1, 2) }} {{ () }} {{ \"it's\" }}{{ [\"it's\"] }}", {}),
 ("string_escapes", "{{ 'a\\tb\\n\\u00e9\\x41\\\\' }}|{{ \"q\\\"q\" }}|{{ 'x' 'y' }}", {}),
 ("arithmetic", "{{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 7 % -3 }} {{ 2 ** 10 }} {{ 2 ** -1 }} {{ 7 / 2 }} {{ 3 * 'ab' }} {{ [0] * 3 }} {{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ 7.5 // 2 }}", {}),
 ("precedence_concat", "{{ 'a' ~ 1 * 2 }} {{ 1 ~ 2 ~ none ~ true }} {{ (1 + 2) ~ 'x' }}", {}),
 ("comparisons_chain", "{{ 1 < 2 < 3 }} {{ 1 < 3 < 2 }} {{ 1 == 1.0 }} {{ 'a' < 'b' }} {{ [1, 2] < [1, 3] }} {{ 1 != 2 }} {{ 1 == true }}", {}),
 ("membership", "{{ 1 in [1, 2] }} {{ 'b' in 'abc' }} {{ 'k' in {'k': 1} }} {{ 3 not in [1] }} {{ 'z' in undefined_thing }}", {}),
 ("logic_returns_operands", "{{ 0 or 'x' }} {{ 'a' and 'b' }} {{ none or [] }} {{ not 0 }} {{ not not 'a' }}", {}),
 ("conditional_expression", "{{ 'yes' if 1 else 'no' }} {{ 'yes' if 0 else 'no' }} [{{ 'x' if false }}] {{ ('x' if false) is defined }}", {}),
 ("unary_minus_and_filters", "{{ -3 | abs }} {{ -(3) }} {{ - 2 ** 2 }}", {}),
 # attribute and item access, undefined semantics
 ("getattr_and_getitem", "{{ d.a }} {{ d['a'] }} {{ l[0] }} {{ l[-1] }} {{ l.0 }} {{ d.missing }}|{{ l[10] }}|{{ d.get('a') }} {{ d.get('zz', 'dflt') }} {{ d.get('zz') }}", {"d": {"a": 1}, "l": [10, 20]}),
 ("attr_prefers_methods", "{{ d.items is defined }} {{ d['items'] }} {{ (d.items()|list)[0] }}", {"d": {"items": "key"}}),
 ("undefined_prints_empty", "[{{ nope }}] {{ nope is defined }} {{ nope is undefined }} {{ nope | default('dflt') }} {{ nope | length }} {{ nope ~ 'x' }}", {}),
 ("none_attribute_is_undefined", "[{{ none.x }}] [{{ none['x'] }}] {{ d.x is none }} {{ d.x is defined }}", {"d": {"x": None}}),
 ("default_filter", "{{ none | default('d') }} {{ '' | default('d') }} {{ '' | default('d', true) }} {{ 0 | d('z', boolean=true) }}", {}),
 ("slicing", "{{ 'hello'[1:3] }} {{ 'hello'[::-1] }} {{ [1,2,3,4,5][::2] }} {{ [1,2,3][-2:] }} {{ [1,2,3][:-1] }} {{ 'héllo'[1] }} {{ 'héllo'[::-1] }} {{ [1,2,3][5:] }} {{ [1,2,3][::-2] }}", {}),
 # statements
 ("if_elif_else", "{% for x in [1, 2, 3] %}{% if x == 1 %}one{% elif x == 2 %}two{% else %}many{% endif %} {% endfor %}", {}),
 ("for_loop_variables", "{% for a in ['x', 'y', 'z'] %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}{{ loop.previtem }}{{ loop.nextitem }}{{ loop.cycle('o', 'e') }};{% endfor %}", {}),
 ("for_else_and_filter", "{% for x in [] %}A{% else %}empty{% endfor %} {% for x in [1,2,3,4] if x is even %}{{ loop.index }}/{{ loop.length }}:{{ x }} {% endfor %}", {}),
 ("for_unpacking", "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}{% for a, b in [[1, 2], (3, 4)] %}{{ a + b }}{% endfor %}{% for k in d %}{{ k }}{% endfor %}{% for c in 'hé' %}[{{ c }}]{% endfor %}", {"d": {"b": 1, "a": 2}}),
 ("break_continue", "{% for i in range(10) %}{% if i == 2 %}{% continue %}{% endif %}{% if i == 5 %}{% break %}{% endif %}{{ i }}{% endfor %}", {}),
 ("loop_scope_does_not_leak", "{% set x = 'outer' %}{% for i in [1, 2] %}{{ x }},{% set x = 'inner' ~ i %}{{ x }};{% endfor %}{{ x }}", {}),
 ("nested_loops", "{% for i in range(2) %}{% for j in range(2) %}{{ loop.index }}{{ i }}{{ j }} {% endfor %}{% endfor %}", {}),
 ("namespace_escapes_loop", "{% set ns = namespace(n=0, found=false) %}{% for i in range(4) %}{% set ns.n = ns.n + i %}{% if i == 2 %}{% set ns.found = true %}{% endif %}{% endfor %}{{ ns.n }} {{ ns.found }} {{ ns }}", {}),
 ("set_tuple_and_block", "{% set a, b = 1, 2 %}{{ a }}{{ b }} {% set blk %}x{{ a }}y{% endset %}{{ blk }} {% set up | upper %}shout{% endset %}{{ up }}", {}),
 ("macro_defaults_varargs_kwargs", "{% macro f(a, b=2, c='c') %}{{ a }}{{ b }}{{ c }}{{ varargs }}{{ kwargs }}{% endmacro %}{{ f(1) }} {{ f(1, 3, 4, 5) }} {{ f(1, c=9, z=8) }} {{ f(a='A') }}", {}),
 ("macro_sees_globals_at_call_time", "{% macro m() %}{{ x }}{% endmacro %}{% set x = 1 %}{{ m() }}{% set x = 2 %}{{ m() }}", {}),
 ("macro_recursion", "{% macro fact(n) %}{% if n <= 1 %}1{% else %}{{ n * (fact(n - 1) | int) }}{% endif %}{% endmacro %}{{ fact(6) }}", {}),
 ("macro_output_is_string", "{% macro m() %}  a  {% endmacro %}[{{ m() | trim }}] {{ m() is string }}", {}),
 ("call_block", "{% macro wrap(tag) %}<{{ tag }}>{{ caller() }}</{{ tag }}>{% endmacro %}{% call wrap('b') %}inside{% endcall %}", {}),
 ("filter_block", "{% filter upper %}hello {{ 'world' }}{% endfilter %}", {}),
 ("generation_block_renders_body", "{% for m in msgs %}{% generation %}[{{ m }}]{% endgeneration %}{% endfor %}", {"msgs": ["a", "b"]}),
 # filters
 ("tojson_variants", "{{ d | tojson }}|{{ d | tojson(indent=2) }}|{{ 'é\"\\n<>&' | tojson }}|{{ [1.0, none, true] | tojson }}|{{ {} | tojson(indent=2) }}|{{ d | tojson(separators=(',', ':')) }}|{{ d | tojson(sort_keys=true) }}|{{ 'é' | tojson(ensure_ascii=true) }}", {"d": {"z": [1, {"y": "v"}], "a": None}}),
 ("string_filters", "{{ '  pad  ' | trim }}|{{ 'xxaxx' | trim('x') }}|{{ 'MiXed' | upper }}{{ 'MiXed' | lower }}|{{ 'hello wORLD-x(y' | title }}|{{ 'hELLO' | capitalize }}|{{ 'a.b.c' | replace('.', '/') }}|{{ 'aaa' | replace('a', 'b', 2) }}", {}),
 ("length_first_last_join", "{{ 'héllo' | length }} {{ [1, 2] | count }} {{ {'a': 1} | length }} {{ [3, 4] | first }} {{ [3, 4] | last }} {{ 'xyz' | first }} {{ [1, 'a', none] | join(', ') }} {{ users | join('/', attribute='name') }}", {"users": [{"name": "ann"}, {"name": "bob"}]}),
 ("map_select_reject", "{{ users | map(attribute='name') | list }} {{ ['a', 'b'] | map('upper') | join }} {{ [1, 2, 3, 4] | select('odd') | list }} {{ [1, 2, 3, 4] | reject('odd') | list }} {{ users | selectattr('admin') | map(attribute='name') | list }} {{ users | rejectattr('admin') | list | length }} {{ users | selectattr('name', 'equalto', 'bob') | list }} {{ users | map(attribute='missing', default='?') | list }}", {"users": [{"name": "ann", "admin": True}, {"name": "bob"}]}),
 ("generators_are_not_lists", "{{ ([1, 2] | select('odd')) is sequence }} {{ ([1, 2] | select('odd')) is iterable }} {{ [] | select | list }}", {}),
 ("sort_unique_dictsort", "{{ [3, 1, 2] | sort }} {{ ['b', 'A', 'a'] | sort }} {{ ['b', 'A', 'a'] | sort(case_sensitive=true) }} {{ [3, 1] | sort(reverse=true) }} {{ users | sort(attribute='age') | map(attribute='n') | list }} {{ [1, 2, 1, 'A', 'a'] | unique | list }} {{ d | dictsort }} {{ d | dictsort(reverse=true) }} {{ d | dictsort(by='value') }}", {"users": [{"n": "x", "age": 3}, {"n": "y", "age": 1}], "d": {"b": 1, "a": 2}}),
 ("items_list_string_int_float", "{{ d | items | list }} {{ 'ab' | list }} {{ d | list }} {{ 3.7 | int }} {{ '42' | int }} {{ 'x' | int }} {{ 'x' | int(7) }} {{ '1.5' | float }} {{ 3 | float }} {{ true | int }} {{ [1] | string }} {{ none | string }}", {"d": {"k": "v"}}),
 ("indent_filter", "{{ 'a\\nb\\n\\nc' | indent(2) }}|{{ 'a\\nb' | indent(2, true) }}|{{ 'a\\n\\nb' | indent(2, blank=true) }}|{{ 'a\\nb' | indent('>') }}", {}),
 ("round_abs_sum_min_max", "{{ 2.5 | round }} {{ 3.5 | round }} {{ 2.567 | round(2) }} {{ 2.1 | round(0, 'ceil') }} {{ 2.9 | round(method='floor') }} {{ 3 | round }} {{ -2 | abs }} {{ [1, 2, 3] | sum }} {{ [3, 1, 2] | min }} {{ [3, 1, 2] | max }} {{ ['b', 'A'] | max }}", {}),
 ("misc_filters", "{{ [1, 2, 3, 4, 5] | batch(2) | list }} {{ 'a b  c' | wordcount }} {{ 'ab' | center(6) }}| {{ 'ab' | reverse }} {{ [1, 2] | reverse | list }} {{ '%s-%03d' | format('x', 7) }} {{ '<a&b>' | e }} {{ '<a>' | escape }} {{ '<a>' | safe }}", {}),
 ("markup_plus_escapes_plain", "{{ '<b>' | safe + '<i>' }} {{ '<i>' + '<b>' | safe }} {{ '<b>' | safe ~ '<i>' }} {{ ('<x>' | safe).strip() + '&' }}", {}),
 # tests
 ("type_tests", "{{ 1 is number }}{{ 1.5 is float }}{{ true is number }}{{ true is integer }}{{ 1 is integer }}{{ 'a' is string }}{{ [] is sequence }}{{ {} is mapping }}{{ {} is sequence }}{{ 'a' is iterable }}{{ none is none }}{{ true is boolean }}{{ 1 is boolean }}{{ false is false }}{{ true is true }}{{ 1 is true }}{{ nope is iterable }}{{ range is callable }}", {}),
 ("value_tests", "{{ 4 is even }}{{ 3 is odd }}{{ 9 is divisibleby 3 }}{{ 9 is divisibleby(4) }}{{ 1 is eq 1 }}{{ 1 is ne 2 }}{{ 1 is lt 2 }}{{ 2 is ge 2 }}{{ 1 is in [1] }}{{ 'ab' is lower }}{{ 'AB' is upper }}{{ 1 is sameas 1 }}{{ x is not defined }}{{ 'a' is not none }}", {}),
 # python methods
 ("string_methods", "{{ '  x  '.strip() }}|{{ 'xxaxx'.strip('x') }}|{{ '  x'.lstrip() }}|{{ 'x\\n\\n'.rstrip('\\n') }}|{{ 'a b  c'.split() }}|{{ 'a,b,,c'.split(',') }}|{{ 'a b c'.split(' ', 1) }}|{{ 'a,b,c'.rsplit(',', 1) }}|{{ 'x'.startswith(('a', 'x')) }}{{ 'abc'.endswith('bc') }}|{{ 'abc'.upper() }}{{ 'ABC'.lower() }}|{{ 'hello world'.title() }}|{{ 'aXb'.replace('X', '-') }}|{{ 'abcb'.find('b') }}{{ 'abcb'.rfind('b') }}{{ 'abc'.find('z') }}|{{ 'aaa'.count('a') }}|{{ '-'.join(['a', 'b']) }}|{{ '{} and {name}'.format(1, name='n') }}|{{ 'a\\nb'.splitlines() }}|{{ '12'.isdigit() }}{{ 'ab'.isalpha() }}|{{ 'pre_x'.removeprefix('pre_') }}", {}),
 ("percent_format", "{{ '%s is %d' % ('x', 3) }} {{ '%5.2f|' % 3.14159 }} {{ '%%' % () }} {{ '%(a)s' % {'a': 1} }} {{ '%r' % 'q' }}", {}),
 ("list_dict_methods", "{{ [1, 2, 1].count(1) }} {{ [1, 2].index(2) }} {{ d.keys() | list }} {{ d.values() | list }} {{ d.items() | list }} {{ d.get('a') }}", {"d": {"a": 1, "b": 2}}),
 ("globals", "{{ range(3) | list }} {{ range(1, 7, 2) | list }} {{ range(3, 0, -1) | list }} {{ dict(a=1, b=2) }} {{ namespace(x=1).x }}", {}),
 ("dict_literal_non_string_keys", "{% set m = {0: 'zero', 512: 'half', 1.0: 'one', none: 'n', (1, 2): 't'} %}{{ m[0] }} {{ m[512] }} {{ m[1] }} {{ m[true] }} {{ m[none] }} {{ m[(1, 2)] }} {{ m | length }} {{ {1: 'a'} | tojson }}", {}),
 ("input_json_order_is_kept", "{{ d | tojson }} {% for k in d %}{{ k }}{% endfor %}", {"d": {"zeta": 1, "alpha": 2, "mid": 3}}),
 ("strftime_now_fixed_clock", "{{ strftime_now('%Y-%m-%d %d %B %Y') }}", {}),
]

ERROR_CASES = [
 # (name, template, vars, expected message substring)
 ("raise_exception_message", "{{ raise_exception('Roles must alternate!') }}", {}, "Roles must alternate!"),
 ("undefined_attribute_of_undefined", "\n{{ nope.x }}", {}, "'nope' is undefined"),
 ("undefined_attribute_chain", "{{ d.missing.x }}", {"d": {}}, "'dict object' has no attribute 'missing'"),
 ("undefined_in_arithmetic", "{{ nope + 1 }}", {}, "'nope' is undefined"),
 ("concat_binds_tighter_than_plus", "{{ 1 + 2 ~ 3 }}", {}, "unsupported operand type(s) for +: 'int' and 'str'"),
 ("type_error_concat", "{{ 'a' + 1 }}", {}, "can only concatenate str"),
 ("not_iterable", "{% for x in 5 %}{% endfor %}", {}, "'int' object is not iterable"),
 ("none_not_iterable", "{% for x in none %}{% endfor %}", {}, "'NoneType' object is not iterable"),
 ("division_by_zero", "{{ 1 / 0 }}", {}, "division by zero"),
 ("unorderable", "{{ 1 < 'a' }}", {}, "'<' not supported between instances of 'int' and 'str'"),
 ("tojson_undefined", "{{ nope | tojson }}", {}, "Object of type Undefined is not JSON serializable"),
 ("tojson_generator", "{{ [1] | map('string') | tojson }}", {}, "Object of type generator is not JSON serializable"),
 ("sandbox_refuses_list_append", "{% set l = [] %}{% set _ = l.append(1) %}", {}, "access to attribute 'append' of 'list' object is unsafe."),
 ("sandbox_refuses_dict_update", "{% set d = {} %}{% set _ = d.update({}) %}", {}, "access to attribute 'update' of 'dict' object is unsafe."),
 ("unknown_filter", "{{ 1 | nosuchfilter }}", {}, "nosuchfilter"),
 ("unknown_test", "{{ 1 is nosuchtest }}", {}, "nosuchtest"),
 ("calling_non_callable", "{{ 'a'() }}", {}, "not callable"),
 ("set_attr_on_non_namespace", "{% set d = {} %}{% set d.x = 1 %}", {}, "non-namespace"),
]

SYNTAX_ERRORS = [
 # (name, template, expected line)
 ("unclosed_if", "{% if true %}\nabc\n", 2),
 ("unknown_tag", "a\n{% frobnicate %}", 2),
 ("bad_expression", "\n\n{{ 1 + }}", 3),
 ("unterminated_string", "{{ 'abc }}", 1),
 ("unclosed_print", "line1\n{{ x ", 2),
 ("endfor_without_for", "{% endfor %}", 1),
 ("break_outside_loop", "{% break %}", 1),
 ("stray_else", "{% for x in y %}{% else %}{% else %}{% endfor %}", 1),
]

out=[]
for name, tpl, vars in CASES:
    r = ref.compile(tpl).render(**vars)
    out.append({"name": name, "template": tpl, "vars": vars, "expected": r})
errs=[]
for name, tpl, vars, msg in ERROR_CASES:
    try:
        ref.compile(tpl).render(**vars); raise SystemExit('no error: '+name)
    except SystemExit: raise
    except Exception as e:
        assert msg in str(e), (name, str(e))
    errs.append({"name": name, "template": tpl, "vars": vars, "error": msg})
syn=[]
for name, tpl, line in SYNTAX_ERRORS:
    try:
        ref.compile(tpl); raise SystemExit('no syntax error: '+name)
    except SystemExit: raise
    except Exception as e:
        assert name == 'break_outside_loop' or getattr(e, 'lineno', None) == line, (name, e, getattr(e,'lineno',None))
    syn.append({"name": name, "template": tpl, "line": line})
json.dump({"cases": out, "errors": errs, "syntax_errors": syn}, open(sys.argv[1],'w'), indent=1, ensure_ascii=False)
print(len(out), len(errs), len(syn))
