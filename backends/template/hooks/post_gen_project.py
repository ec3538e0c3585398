"""Keep the files of the chosen device kind.

The project folder holds the functional kind's files in place and the scratchpad kind's under ``_scratchpad/``
(same relative paths). For ``device_kind=scratchpad`` the functional-only files are removed and ``_scratchpad/``
is moved over them; for ``functional`` ``_scratchpad/`` is removed, so the functional project is exactly the
template's original one.
"""
import os
import shutil

KIND = {{ cookiecutter.device_kind | tojson }}
PKG = {{ cookiecutter.__package_name | tojson }}
FUNCTIONAL_ONLY = [os.path.join(PKG, "device.py"), os.path.join(PKG, "kernels.py"), os.path.join(PKG, "kernels_c")]

if KIND == "scratchpad":
    for rel in FUNCTIONAL_ONLY:
        shutil.rmtree(rel) if os.path.isdir(rel) else os.remove(rel)
    for root, _, files in os.walk("_scratchpad"):
        for f in files:
            src = os.path.join(root, f)
            dst = os.path.relpath(src, "_scratchpad")
            os.makedirs(os.path.dirname(dst) or ".", exist_ok=True)
            os.replace(src, dst)
shutil.rmtree("_scratchpad")
