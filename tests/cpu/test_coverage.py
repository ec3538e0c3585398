"""The cpu backend's --coverage build (``CPUBackend.coverage_build``, glow_cpu.build.coverage): every ``#line`` directive
on a line of its own, with the template line it names, whatever the template does around it (a macro's output
after text or indentation, loops, tags)."""
from __future__ import annotations

import re
import subprocess

import jinja2

from glow_cpu.build.coverage import c_lines, instrument

TEMPLATE = """{% macro tile(n) -%}
{% for i in range(n) %}  acc += x[{{ i }}];
{% endfor %}  return acc;
}
{%- endmacro %}
float f(const float *x) {
  float acc = 0;
{{ tile(3) }}
float g(const float *x) {
  float acc = 1;
    {{ tile(2) }}
"""


def test_directives_stand_alone_and_the_c_compiles(tmp_path):
    src = jinja2.Environment().from_string(instrument(TEMPLATE, "t.c.j2")).render()
    assert all(line.startswith("#line") for line in src.splitlines() if "#line" in line)
    named = {int(m.group(1)) for m in re.finditer(r'#line (\d+) "t.c.j2"', src)}
    assert named == set(c_lines(TEMPLATE))  # every C line of the template, the macro's body included
    (tmp_path / "t.c").write_text(src)
    r = subprocess.run(["cc", "-c", "-Wall", "-Werror", "-o", str(tmp_path / "t.o"), str(tmp_path / "t.c")],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
