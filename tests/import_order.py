"""Which of `keras` and `tensorflow` a fresh process asks for first: `imports_asked(...)` runs
`code` under KERAS_BACKEND=`backend` with stub `keras` and `torch` packages first on the path
(no torch needed) and returns the printed order, e.g. "['keras', 'tensorflow']"."""

from __future__ import annotations

import os
import subprocess
import sys

FINDER = (
    "import sys\n"
    "seen = []\n"
    "class Finder:\n"
    "    def find_spec(self, name, path=None, target=None):\n"
    "        if name in ('keras', 'tensorflow') and name not in seen:\n"
    "            seen.append(name)\n"
    "sys.meta_path.insert(0, Finder())\n"
)


def imports_asked(tmp_path, backend: str, code: str) -> str:
    (tmp_path / "keras").mkdir()
    (tmp_path / "keras" / "__init__.py").write_text("")
    (tmp_path / "torch").mkdir()  # found by keras_vit's backend check, never imported here
    (tmp_path / "torch" / "__init__.py").write_text("")
    path = os.pathsep.join([str(tmp_path), *filter(None, [os.environ.get("PYTHONPATH")])])
    env = {**os.environ, "KERAS_BACKEND": backend, "PYTHONPATH": path}
    script = FINDER + code + "print(seen)\n"
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.strip().splitlines()[-1]
