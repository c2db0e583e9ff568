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

# Coverage of the Jinja that chat templates beyond the 56 shared ones use (jinja2 docs, HF
# chat_template_utils, minja's tests): statements, loop variables, expressions, filters, methods.
CASES += [
 # statements seen in Llama/Qwen/Mistral/Gemma/Phi/DeepSeek/Hermes/Command-R/Granite templates
 ("for_recursive_loop", "{% for item in tree recursive %}[{{ item.name }}@{{ loop.depth }}/{{ loop.depth0 }}{% if item.children %}:{{ loop(item.children) }}{% endif %}]{% endfor %}", {"tree": [{"name": "a", "children": [{"name": "b", "children": [{"name": "c"}]}, {"name": "d"}]}, {"name": "e"}]}),
 ("for_recursive_with_filter_and_else", "{% for x in items if x.keep recursive %}{{ x.n }}({{ loop.index }}/{{ loop.length }}){{ loop(x.sub or []) }}{% else %}-{% endfor %}", {"items": [{"n": 1, "keep": True, "sub": [{"n": 2, "keep": True}, {"n": 3}]}, {"n": 4}]}),
 ("loop_changed_and_cycle", "{% for x in [1, 1, 2, 3, 3] %}{% if loop.changed(x) %}{{ x }}{% endif %}{{ loop.cycle('a', 'b', 'c') }}{% endfor %}", {}),
 ("loop_previtem_nextitem_filtered", "{% for x in range(6) if x is odd %}{{ loop.previtem is defined }}{{ loop.previtem }}<{{ x }}>{{ loop.nextitem }}{{ loop.revindex }}{{ loop.revindex0 }};{% endfor %}", {}),
 ("for_over_dict_items_and_string", "{% for k, v in d.items() %}{{ loop.index }}{{ k }}={{ v }} {% endfor %}{% for k, v in d | dictsort %}{{ k }}{{ v }}{% endfor %} {% for ch in 'abc' %}{{ ch }}{{ ',' if not loop.last }}{% endfor %} {% for (a, b) in [(1, 2)] %}{{ a }}{{ b }}{% endfor %}", {"d": {"z": 1, "a": 2}}),
 ("break_continue_with_else", "{% for i in range(5) %}{% if i is odd %}{% continue %}{% endif %}{{ i }}{% if i >= 2 %}{% break %}{% endif %}{% else %}never{% endfor %}|{% for i in [] %}x{% else %}empty{% endfor %}", {}),
 ("set_block_forms", "{% set a %}\n  x {{ 1 + 1 }}\n{% endset %}[{{ a }}]{% set b | trim | upper %}  hi  {% endset %}[{{ b }}]{% set ns = namespace(t='') %}{% set ns.t %}ns{{ 'block' }}{% endset %}[{{ ns.t }}]", {}),
 ("set_in_if_is_visible", "{% if true %}{% set x = 5 %}{% endif %}{{ x }}{% for i in [1] %}{% if true %}{% set y = 1 %}{% endif %}{{ y }}{% endfor %}[{{ y }}]", {}),
 ("namespace_forms", "{% set ns = namespace(a=1, b=[1, 2]) %}{% set ns.a = ns.a + 1 %}{{ ns.a }} {{ ns.b }} {% set n2 = namespace({'x': 1}, y=2) %}{{ n2.x }}{{ n2.y }} {{ ns.missing is defined }} {{ ns['a'] }}", {}),
 ("with_statement", "{% with a = 1, b = 'x' %}{{ a }}{{ b }}{% endwith %}[{{ a }}]{% with %}{% set c = 3 %}{{ c }}{% endwith %}[{{ c }}]", {}),
 ("macro_defaults_refer_params", "{% macro f(a, b=a * 2, c=none) %}{{ a }},{{ b }},{{ c }}{% endmacro %}{{ f(1) }} {{ f(1, c='z') }} {{ f(b=5, a=0) }}", {}),
 ("macro_caller_with_args", "{% macro each(items) %}{% for i in items %}{{ caller(i, loop.index) }}{% endfor %}{% endmacro %}{% call(x, n) each(['a', 'b']) %}{{ n }}:{{ x }};{% endcall %}", {}),
 ("macro_caller_nested", "{% macro outer() %}<{{ caller() }}>{% endmacro %}{% macro inner() %}({{ caller() }}){% endmacro %}{% call outer() %}{% call inner() %}x{% endcall %}{% endcall %}", {}),
 ("macro_attributes", "{% macro m(a, b=1) %}{% endmacro %}{{ m.name }} {{ m.arguments }} {{ m.arguments | length }}", {}),
 ("macro_kwargs_varargs_in_body", "{% macro m() %}{{ varargs | length }}{{ kwargs | dictsort }}{% endmacro %}{{ m(1, 2, x=3) }}", {}),
 ("filter_block_with_args", "{% filter indent(2, true) %}a\nb{% endfilter %}|{% filter replace('a', 'b') | upper %}aaa{% endfilter %}", {}),
 ("raw_with_whitespace_control", "x\n  {%- raw -%}\n  {{ y }}\n  {%- endraw -%}\n  z", {}),
 ("whitespace_control_mix", "a\n  {%- for i in [1, 2] %}\n    {{ i }}\n  {%- endfor %}\nb {{- ' c ' -}} d\n{#- c -#}\ne  {%+ if true %}f{% endif %}\n  {% if true -%}\n  g\n{% endif %}", {}),
 ("lstrip_only_leading_whitespace", "x  {% if true %}y{% endif %}\n\t {% if true %}z{% endif %}\n  {{ 'w' }}\n  {# c #}v", {}),
 ("comment_with_tags_inside", "a{# {% if %} {{ x }} #}b{#\nmulti\nline\n#}\nc", {}),
 # expressions
 ("slicing_steps", "{{ [1,2,3,4,5][1:-1] }} {{ [1,2,3,4,5][::-1] }} {{ 'abcdef'[::2] }} {{ 'abcdef'[-3:] }} {{ [1,2,3][:0] }} {{ 'abc'[5:] }} {{ (1,2,3)[1:] }} {{ [1,2,3,4][3:0:-1] }} {{ messages[1:] | length }}", {"messages": [1, 2, 3]}),
 ("membership_all_types", "{{ 'a' in 'cat' }} {{ 'x' not in 'cat' }} {{ 2 in (1, 2) }} {{ 'k' in d }} {{ 'v' in d }} {{ 'k' not in d }} {{ [1] in [[1], 2] }} {{ 'role' in m }}", {"d": {"k": "v"}, "m": {"role": "user"}}),
 ("ternary_forms", "{{ 'a' if true else 'b' }}{{ 'a' if false else 'b' if true else 'c' }}[{{ 'x' if false }}]{{ ('y' if true) | upper }}{{ 1 + (2 if true else 3) }}{{ x | default('d') if x is defined else 'nd' }}", {}),
 ("is_tests_full", "{{ 1 is defined }}{{ x is undefined }}{{ none is none }}{{ 'a' is string }}{{ 1.0 is number }}{{ 1 is integer }}{{ 1.0 is float }}{{ false is boolean }}{{ true is true }}{{ false is false }}{{ {} is mapping }}{{ 'x' is iterable }}{{ [] is sequence }}{{ dict is callable }}{{ 2 is even }}{{ 3 is odd }}{{ 6 is divisibleby 3 }}{{ 'a' is lower }}{{ 'A' is upper }}{{ 1 is eq 1 }}{{ 1 is equalto 1 }}{{ 1 is ne 2 }}{{ 1 is lt 2 }}{{ 2 is gt 1 }}{{ 1 is le 1 }}{{ 1 is ge 1 }}{{ 1 is in [1] }}{{ 1 is greaterthan 0 }}{{ 1 is lessthan 0 }}", {}),
 ("is_filter_and_test_tests", "{{ 'upper' is filter }}{{ 'nope' is filter }}{{ 'odd' is test }}{{ 'nope' is test }}{{ 'tojson' is filter }}{{ 'escaped' is test }}", {}),
 ("tests_in_select", "{{ [1, none, 'a', 2.5, [1]] | select('number') | list }} {{ [1, none, 'a'] | reject('none') | list }} {{ msgs | selectattr('role', 'in', ['user', 'tool']) | map(attribute='c') | join }} {{ msgs | selectattr('c', 'defined') | list | length }} {{ msgs | rejectattr('role', 'equalto', 'user') | map(attribute='role') | list }} {{ [3, 4, 5] | select('divisibleby', 2) | list }} {{ [1, 2, 3] | select('gt', 1) | list }} {{ ['a', 'B'] | select('upper') | list }}", {"msgs": [{"role": "user", "c": "x"}, {"role": "assistant"}, {"role": "tool", "c": "y"}]}),
 ("comparison_chains", "{{ 1 < 2 <= 2 < 3 }} {{ 3 > 2 > 2 }} {{ 1 == 1 == 1 }} {{ 1 != 2 != 1 }} {{ 'a' < 'b' < 'c' }} {{ 0 < x < 10 }}", {"x": 5}),
 ("arithmetic_ops", "{{ 7 // 2 }} {{ -7 // 2 }} {{ 7.0 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 5.5 % 2 }} {{ 2 ** 3 ** 2 }} {{ 2 ** 0.5 }} {{ 10 / 4 }} {{ 4 / 2 }} {{ -2 ** 2 }} {{ (-2) ** 2 }} {{ 1 + 2.0 }} {{ true + 1 }} {{ 3 * 1.5 }} {{ 1e3 }} {{ 1.5e-7 }} {{ 123456789012345678 }} {{ 1e16 }} {{ 0.1 * 3 }}", {}),
 ("string_escapes_more", "{{ 'it\\'s' }} {{ \"say \\\"hi\\\"\" }} {{ 'tab\\there' }} {{ 'back\\\\slash' }} {{ '\\u00e9\\U0001F600' }} {{ 'nl\\nx' | length }} {{ '\\d' }} {{ 'a\\\nb' }}", {}),
 ("concat_tilde", "{{ 'a' ~ 1 ~ none ~ true ~ 1.5 ~ [1] ~ {'k': 1} }} {{ x ~ 'y' }} {{ 1 ~ 2 | string }}", {}),
 ("literals_misc", "{{ True }}{{ False }}{{ None }}{{ none is none }} {{ [1, 2,] }} {{ {'a': 1,} }} {{ (1,) }} {{ () | length }}", {}),
 # filters
 ("filters_strings", "{{ 'Hello World' | lower }} {{ 'hello' | upper }} {{ 'hello world' | title }} {{ 'hello World' | capitalize }} {{ '  x ' | trim }}|{{ 'a-b-c' | replace('-', '+') }} {{ 'abc' | string }} {{ 42 | string }} {{ true | string }} {{ none | string }} {{ 'a b c' | wordcount }} {{ 'abc' | center(7) }}| {{ 'x' | center(4) }}|", {}),
 ("filters_truncate", "{{ 'hello world foo bar' | truncate(9) }}|{{ 'hello world foo bar' | truncate(9, true) }}|{{ 'hello world foo bar' | truncate(11, false, '>>', 0) }}|{{ 'short' | truncate(255) }}|{{ 'hello world foo' | truncate(12) }}|{{ 'abcdefghijklmnop' | truncate(10, true, '') }}", {}),
 ("filters_striptags", "{{ '<b>bold</b>  and <i>it</i>\\n next' | striptags }}|{{ 'a &amp; b' | striptags }}|{{ '<!-- c -->x' | striptags }}", {}),
 ("filters_wordwrap", "{{ 'the quick brown fox jumps over the lazy dog' | wordwrap(10) }}|{{ 'aaaaaaaaaaaaaaa bb' | wordwrap(5) }}|{{ 'aaaaaaaaaaaaaaa bb' | wordwrap(5, false) }}", {}),
 ("filters_numbers", "{{ '12' | int + 1 }} {{ '0x1A' | int(0, 16) }} {{ '0x1A' | int(base=16) }} {{ '0b101' | int(base=2) }} {{ 'ff' | int(base=16) }} {{ '3.9' | int }} {{ -3.9 | int }} {{ '1e3' | float }} {{ 'abc' | float(1.5) }} {{ 2.5 | round }} {{ -2.5 | round }} {{ 2.675 | round(2) }} {{ 7 | round }} {{ 2.4 | round(0, 'ceil') }} {{ -5 | abs }} {{ -5.5 | abs }} {{ [1, 2.5] | sum }} {{ [{'n': 1}, {'n': 2}] | sum(attribute='n') }} {{ [1] | sum(start=10) }}", {}),
 ("filters_lists", "{{ [3, 1, 2] | sort | list }} {{ [3, 1, 2] | sort(reverse=true) }} {{ ['b', 'a', 'C'] | sort }} {{ ['b', 'a', 'C'] | sort(case_sensitive=true) }} {{ users | sort(attribute='age', reverse=true) | map(attribute='n') | join }} {{ users | sort(attribute='g,age') | map(attribute='n') | join }} {{ [1, 2, 2, 'a', 'A'] | unique | list }} {{ ['a', 'A'] | unique(case_sensitive=true) | list }} {{ users | unique(attribute='g') | map(attribute='n') | list }} {{ [1, 2, 3] | reverse | list }} {{ 'abc' | reverse }} {{ [4, 5] | first }} {{ [4, 5] | last }} {{ (1, 2) | list }} {{ 'ab' | list }} {{ users | min(attribute='age') }} {{ users | max(attribute='age') }} {{ ['b', 'A', 'c'] | min }} {{ [] | first is defined }}", {"users": [{"n": "x", "age": 3, "g": 2}, {"n": "y", "age": 1, "g": 1}, {"n": "z", "age": 2, "g": 2}]}),
 ("filters_map", "{{ ['1', '2'] | map('int') | sum }} {{ ['a', 'b'] | map('upper') | list }} {{ ['a-b', 'c-d'] | map('replace', '-', '+') | list }} {{ users | map(attribute='name') | join(', ') }} {{ users | map(attribute='info.age') | list }} {{ users | map(attribute='nope', default='?') | list }} {{ [[1, 2], [3]] | map('length') | list }} {{ [{'a': 1}] | map('tojson') | list }} {{ users | map(attribute=0) | list }}", {"users": [{"name": "ann", "info": {"age": 3}, "0": "zero"}, {"name": "bob", "info": {"age": 4}}]}),
 ("filters_groupby", "{% for g in users | groupby('city') %}{{ g.grouper }}:{{ g.list | map(attribute='n') | join }};{% endfor %} {% for city, items in users | groupby('city') %}{{ city }}{{ items | length }}{% endfor %} {{ users | groupby('city') | map(attribute='grouper') | list }} {% for g in users | groupby('x', default='none') %}{{ g.grouper }}{{ g.list | length }}{% endfor %}", {"users": [{"n": "a", "city": "NY"}, {"n": "b", "city": "LA", "x": "q"}, {"n": "c", "city": "NY"}]}),
 ("filters_batch_slice", "{{ [1, 2, 3, 4, 5] | batch(2) | list }} {{ [1, 2, 3, 4, 5] | batch(2, 0) | list }} {{ [1, 2, 3, 4, 5] | slice(2) | list }} {{ [1, 2, 3, 4, 5, 6, 7] | slice(3) | list }} {{ [1, 2, 3, 4] | slice(3, 'x') | list }} {{ [] | slice(2) | list }}", {}),
 ("filters_dicts", "{{ d | dictsort }} {{ d | dictsort(by='value') }} {{ d | dictsort(reverse=true) }} {{ d | items | list }} {{ d | list }} {{ d | length }} {{ d | tojson }} {{ d | first }} {{ d | join(',') }} {{ d | dictsort(false, 'value', true) }}", {"d": {"b": 2, "a": 3, "C": 1}}),
 ("filters_default", "{{ x | default('d') }} {{ x | d('d2') }} {{ none | default('d') }} {{ '' | default('d') }} {{ '' | default('d', true) }} {{ 0 | default(5, boolean=true) }} {{ x | default }}| {{ d.nope | default('dd') }} {{ d.k | default('z') }}", {"d": {"k": None}}),
 ("filters_tojson_hf", "{{ d | tojson }}|{{ d | tojson(indent=2) }}|{{ d | tojson(indent=4, sort_keys=true) }}|{{ d | tojson(separators=(',', ':')) }}|{{ d | tojson(ensure_ascii=true) }}|{{ [1, 'é', (1, 2), 1.0, 1e100, none, false] | tojson }}|{{ 'x' | tojson(indent='\\t') }}|{{ {'a': [1, {'b': []}]} | tojson(indent='\\t') }}|{{ {'a': {}} | tojson(indent=0) }}", {"d": {"name": "f", "desc": "é <&> \"q\"", "p": {"b": 1, "a": [True, None]}}}),
 ("filters_safe_escape", "{{ '<a href=\"x\">' | e }} {{ '<a>' | escape | length }} {{ '<a>' | safe }} {{ '<a>' | safe | e }} {{ '<b>' | forceescape }} {{ \"'&'\" | escape }} {{ ('<x>' | e) ~ '<y>' }}", {}),
 ("filters_indent", "{{ 'a\\nb\\n  c' | indent }}|{{ 'a\\nb' | indent(width=1, first=true) }}|{{ 'a\\n\\nb\\n' | indent(2) }}|{{ 'a\\n\\nb' | indent(2, blank=true) }}|{{ '' | indent(2, true) }}", {}),
 ("filters_format", "{{ '%s, %s!' | format('Hello', 'World') }} {{ '%d items' | format(3) }} {{ '%.2f' | format(3.14159) }} {{ '%5s|%-5s|' | format('a', 'b') }} {{ '%03d' | format(7) }} {{ '%x %o %e' | format(255, 8, 12345.678) }} {{ '%(name)s' | format(name='n') }} {{ '%s' % [1, 2] }} {{ '%c' | format(65) }} {{ '%5.1f%%' | format(99.44) }}", {}),
 ("filters_misc_more", "{{ [1, 2, 3] | join }} {{ [1, 2] | join(', ') }} {{ 'abc' | join('-') }} {{ users | join(', ', attribute='n') }} {{ {'a': 1} | pprint }} {{ 'x' | attr('upper') is callable }} {{ 12345678 | filesizeformat }} {{ 1024 | filesizeformat(true) }} {{ 'a b&c' | urlencode }} {{ {'a': 'x y', 'b': 1} | urlencode }} {{ [1, 2] | string }} {{ 'abc' | length }} {{ 3 | string | length }}", {"users": [{"n": "a"}, {"n": "b"}]}),
 ("filters_xmlattr", "<tag{{ {'class': 'a b', 'id': 'x<y', 'skip': none} | xmlattr }}>", {}),
 # methods
 ("str_methods_more", "{{ '  x  '.strip() }}|{{ 'xyhixy'.strip('xy') }}|{{ '..a..'.lstrip('.') }}|{{ '..a..'.rstrip('.') }}|{{ 'a,b,c'.split(',', 1) }}|{{ 'a,b,c'.split(sep=',', maxsplit=1) }}|{{ '  a  b '.split() }}|{{ 'a\\tb\\nc'.split(None, 1) }}|{{ 'abc'.startswith('ab') }}{{ 'abc'.startswith(('x', 'a')) }}{{ 'abc'.endswith(('c',)) }}{{ 'abc'.startswith('b', 1) }}{{ 'abc'.endswith('b', 0, 2) }}|{{ 'aXbX'.replace('X', 'y', 1) }}|{{ 'hello world'.capitalize() }}|{{ 'Hello'.swapcase() }}|{{ 'abcabc'.find('c') }}{{ 'abcabc'.find('c', 3) }}{{ 'abcabc'.rfind('a') }}{{ 'abcabc'.index('b') }}{{ 'abcabc'.count('bc') }}{{ 'abc'.find('') }}|{{ ', '.join(['x', 'y']) }}|{{ '{0}-{1}-{0}'.format('a', 'b') }}|{{ '{:>4}|{:<4}|{:^5}|'.format('r', 'l', 'c') }}|{{ '{:.3f}'.format(2.0) }}|{{ '{x}'.format(x=[1]) }}|{{ 'a=b=c'.partition('=') }}{{ 'a=b=c'.rpartition('=') }}|{{ 'Hello World'.istitle() }}{{ 'abc'.isidentifier() }}|{{ 'ab'.zfill(4) }}{{ '-5'.zfill(4) }}|{{ 'a\\tb'.expandtabs(4) }}|", {}),
 ("str_methods_unicode_whitespace", "[{{ '\\u00a0\\u3000 x \\u2003'.strip() }}]{{ 'a\\u00a0b\\u3000c'.split() }}[{{ '\\u00a0y\\u00a0' | trim }}]{{ '\\u3000'.isspace() }}", {}),
 ("str_methods_unicode_case", "{{ 'ÉCOLE über' | lower }} {{ 'straße é' | upper }} {{ 'émile zola' | title }} {{ 'élan' | capitalize }} {{ 'ΑΒΓ'.lower() }} {{ 'привет'.upper() }} {{ 'éa'.islower() }}", {}),
 ("dict_methods_more", "{{ d.get('a') }} {{ d.get('z', 0) }} {{ d.get('z') }} {{ d.keys() | list }} {{ d.values() | list }} {{ d.items() | list }} {% for k, v in d.items() %}{{ k }}{{ v }}{% endfor %} {{ d.copy() }} {{ 'a' in d.keys() }} {{ d.items() | length }} {{ d.keys() | first }}", {"d": {"a": 1, "b": None}}),
 ("list_methods_more", "{{ l.index(2) }} {{ l.count(1) }} {{ l.copy() }} {{ l[0] }} {{ l | length }} {{ (l + [9]) | last }} {{ l * 2 }}", {"l": [1, 2, 1]}),
 # globals
 ("globals_more", "{{ range(5) | list }} {{ range(2, 10, 3) | list }} {{ range(5, 0, -2) | list }} {{ range(0) | list }} {{ dict(a=1) }} {{ dict({'x': 1}, y=2) }} {{ dict([('k', 'v')]) }} {{ dict() }} {{ namespace(a=1) }}{% set c = cycler('odd', 'even') %} {{ c.next() }}{{ c.next() }}{{ c.next() }}{{ c.current }}{% set _ = c.reset() %}{{ c.next() }}{% set j = joiner(', ') %} {% for x in 'abc' %}{{ j() }}{{ x }}{% endfor %}{% set j2 = joiner() %}{% for x in 'ab' %}{{ j2() }}{{ x }}{% endfor %}", {}),
 ("raise_exception_not_taken", "{% if false %}{{ raise_exception('no') }}{% endif %}ok", {}),
 ("strftime_now_formats", "{{ strftime_now('%d %b %Y') }} {{ strftime_now('%B %d, %Y') }} {{ strftime_now('%Y-%m-%d') }} {{ strftime_now('%A') }}", {}),
]

# Idioms seen across chat templates (message filtering, tool schemas, scoping, undefined).
CASES += [
 ("chat_idioms_1", "{{ (msgs | selectattr('role', 'equalto', 'user') | list | last).content }}|{{ msgs | map(attribute='role') | unique | list }}|{% for m in msgs | reverse %}{{ m.role[0] }}{% endfor %}|{% for m in msgs[::-1] %}{{ loop.index }}{% endfor %}|{% for i in range(msgs | length - 1, -1, -1) %}{{ i }}{% endfor %}|{{ msgs[-1]['content'] }}|{{ (msgs | length) - 1 }}|{{ msgs[0].content[:3] }}", {"msgs": [{"role": "system", "content": "sys prompt"}, {"role": "user", "content": "u1"}, {"role": "assistant", "content": "a1"}, {"role": "user", "content": "u2"}]}),
 ("chat_idioms_2", "{{ m.get('content') or '' }}|{{ m.get('missing') or 'none' }}|{{ 'tool_calls' in m and m.tool_calls }}|{{ m.content | default('', true) }}|{{ m.tool_calls | length > 0 }}|{{ m.content is not string }}|{{ m.content is none }}|{{ '=' * 5 }}|{{ 3 > 2 and 'a' or 'b' }}|{{ not 'x' in 'abc' }}|{{ 1 if false else 2 if true else 3 }}|{{ 10 | string + 'x' }}|{{ -m.n | abs }}", {"m": {"role": "assistant", "content": None, "tool_calls": [{"id": "1"}], "n": 5}}),
 ("chat_idioms_3", "{{ x.split('\\n\\n', 1)[1] }}|{{ x.replace('\\r\\n', '\\n') | length }}|{{ x | trim('\\n') }}|{{ (x | string)[:4] }}|{{ x.split('</think>')[-1].lstrip() }}|{{ x.rstrip() | length }}|{{ x.strip().split('\\n') | length }}", {"x": "head\n\nbody</think>  tail\r\n"}),
 ("tojson_values", "{{ none | tojson }} {{ 3.0 | tojson }} {{ 1e-7 | tojson }} {{ 12345678901234 | tojson }} {{ '\\u2028\\x00\\x1f' | tojson }} {{ 'a/b' | tojson }} {{ (1, 'x') | tojson }} {{ {'k': 1} | tojson | safe }} {{ [] | tojson(indent=2) }} {{ {'b': 1, 'a': {'d': 1, 'c': 2}} | tojson(sort_keys=true, indent=1) }} {{ nope | default(none) | tojson }} {{ 0.5 | tojson }} {{ -0.0 | tojson }}", {}),
 ("props_items", "{% for name, p in tool.parameters.properties | items %}{{ name }}:{{ p.type | default('any') }}{{ '*' if name in tool.parameters.required }};{% endfor %}{% for name, p in tool.parameters.properties.items() | sort(attribute='0') %}{{ name }}{% endfor %} {{ tool.parameters.properties | dictsort(by='key', reverse=true) | map('first') | list }}", {"tool": {"parameters": {"properties": {"z": {"type": "string"}, "a": {}}, "required": ["z"]}}}),
 ("whitespace_tabs", "\t{% if true %}\n\tA\n\t{% endif %}\n  \t{%- if true %} B{% endif %}\n\t\t{#- c #}\nC", {}),
 ("nested_macros_and_caller_defined", "{% macro inner(x) %}{{ caller() if caller is defined else '-' }}{{ x }}{% endmacro %}{% macro outer(x) %}[{{ inner(x) }}]{% endmacro %}{{ outer(1) }}{% call inner(2) %}C{% endcall %}", {}),
 ("set_scoping_rules", "{% set x = 1 %}{% macro m() %}{% set x = 2 %}{{ x }}{% endmacro %}{{ m() }}{{ x }}{% for i in [1] %}{% set x = 3 %}{% endfor %}{{ x }}{% if true %}{% set x = 4 %}{% endif %}{{ x }}{% with %}{% set x = 5 %}{% endwith %}{{ x }}{% filter upper %}{% set x = 6 %}{% endfilter %}{{ x }}{% set b %}{% set x = 7 %}{% endset %}{{ x }}{% generation %}{% set x = 8 %}{% endgeneration %}{{ x }}", {}),
 ("loop_in_loop_outer_access", "{% for a in [1, 2] %}{% set outer = loop %}{% for b in [3, 4] %}{{ outer.index }}{{ loop.index }}{{ loop.first and outer.first }} {% endfor %}{% endfor %}", {}),
 ("string_compare_and_sort_mixed", "{{ 'B' < 'a' }} {{ ['b', 'B', 'a'] | sort }} {{ [[2, 'a'], [1, 'b']] | sort }} {{ [2, 1.5, true] | sort }} {{ 'abc' == 'abc' }} {{ [1, 2] == [1, 2] }} {{ (1, 2) == [1, 2] }} {{ {'a': 1} == {'a': 1} }}", {}),
 ("int_edge", "{{ 2 ** 61 + 2 ** 61 - 1 }} {{ 7 // -2 }} {{ -7 % -3 }} {{ 5 / 2 * 2 }} {{ 1 == 1.0 }} {{ 0.1 + 0.2 == 0.3 }} {{ 3 | float / 2 }} {{ '5' | int * 2 }} {{ 9 ** 0.5 }} {{ (2 ** 0.5) | round(3) }}", {}),
 ("str_format_variants", "{{ '{} {}'.format(1, 'a') }}|{{ '{0!r}'.format('x') }}|{{ '{:5d}|{:<5d}|{:05.1f}'.format(42, 42, 3.14159) }}|{{ '{:,}'.format(1234567) if false else 'skip' }}|{{ '%-6s|%6.2f|%+d' % ('ab', 2.5, 3) }}|{{ '%s and %s' % ('a', 'b') }}|{{ '%(x)s-%(y)d' % {'x': 'X', 'y': 2} }}|{{ '%5s|%-4s|' % ('é', 'ü') }}{{ '{:>3}|{:*^5}'.format('é', 'ß') }}", {}),
 ("undefined_behaviors", "[{{ u }}][{{ u | default('') }}][{{ u is defined }}][{{ u | length }}][{{ u | list }}][{{ u ~ 'a' }}][{% for x in u %}{{ x }}{% endfor %}][{{ u | string }}][{{ u | lower }}][{{ u | join(',') }}][{{ u | tojson if u is defined else 'undef' }}][{{ u | first is defined }}][{{ 'x' if u }}]", {}),
 ("dict_iteration_order_and_methods", "{% for k in d %}{{ k }}{% endfor %} {% for k, v in d.items() | list | reverse %}{{ k }}{{ v }}{% endfor %} {{ d | length }} {{ d.keys() | sort | join }} {{ d.values() | sum }} {{ d | dictsort | first }} {{ d.get('b', 9) }} {{ d['c'] }}", {"d": {"c": 3, "a": 1, "b": 2}}),
 ("raise_in_expression_not_evaluated", "{{ 'ok' if true else raise_exception('x') }}{{ false and raise_exception('y') }}{{ true or raise_exception('z') }}", {}),
]

ERROR_CASES += [
 ("raise_exception_in_macro", "{% macro check(m) %}{% if m.role not in ['user', 'assistant'] %}{{ raise_exception('Unknown role: ' ~ m.role) }}{% endif %}{% endmacro %}{% for m in msgs %}{{ check(m) }}{% endfor %}", {"msgs": [{"role": "user"}, {"role": "bad"}]}, "Unknown role: bad"),
 ("do_is_not_enabled", "{% set l = [] %}{% do l.append(1) %}", {}, "unknown tag 'do'"),
 ("list_pop_unsafe", "{% set l = [1] %}{{ l.pop() }}", {}, "access to attribute 'pop' of 'list' object is unsafe."),
 ("dict_setdefault_unsafe", "{% set d = {} %}{{ d.setdefault('a', 1) }}", {}, "access to attribute 'setdefault' of 'dict' object is unsafe."),
 ("in_none", "{{ 'a' in none }}", {}, "argument of type 'NoneType' is not iterable"),
 ("str_index_missing", "{{ 'abc'.index('z') }}", {}, "substring not found"),
 ("undefined_loop_call_outside_recursive", "{% for x in [1] %}{{ loop([]) }}{% endfor %}", {}, "recursive"),
 ("include_has_no_loader", "{% include 'x.j2' %}", {}, "no loader for this environment specified"),
 ("cycler_requires_items", "{{ cycler().next() }}", {}, "at least one item has to be provided"),
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
