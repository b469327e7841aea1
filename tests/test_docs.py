"""The documents say what the tool does.

Issue 17 item 13: every fenced ``sh`` block of ``README.md`` and ``docs/*.md``
is run, in document order, in one shell per document, in a temporary copy of
the repository (``l2sched`` and ``python`` on ``PATH`` are this
interpreter). A block that cannot run here is marked on the line before its
fence with ``<!-- doc-test: skip: REASON -->`` (a GPU, a vLLM server, an
install into the environment) and is reported as skipped with that reason.

Issue 17 item 17: examples in the documents come from the tool. The rule
examples of ``docs/lint.md`` are generated from lint runs
(``l2sched docs lint``; ``tests/test_layout.py`` checks the file is current),
and the checks below tie the other documented outputs and options to the
code: ``explain``'s left-over line and ``--graph-mode``/``--capturing``, the
line-ending rule of ``docs/language.md``, the overrides of the retune
example in ``docs/vllm.md``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md"] + sorted((ROOT / "docs").glob("*.md"))
SKIP = re.compile(r"^<!-- doc-test: skip: (.+?) -->$")
#: A block that needs a module or a package version this environment may
#: lack: ``<!-- doc-test: needs: torch -->``, ``needs: setuptools>=77``. It
#: runs where the need is met, else it is skipped with that reason (README's
#: test command runs on a plain ``pip install -e '.[test]'``).
NEEDS = re.compile(r"^<!-- doc-test: needs: ([\w.-]+)(?:>=([\d.]+))? -->$")


def unmet_need(marker: str) -> str | None:
    """Why the block under ``marker`` (a ``needs:`` line) cannot run here,
    or None when it can (or the line is no ``needs:`` marker)."""
    import importlib.metadata
    import importlib.util
    m = NEEDS.match(marker)
    if not m:
        return None
    name, least = m.groups()
    if least is None:
        return None if importlib.util.find_spec(name) else f"needs {name} (not importable)"
    try:
        have = importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return f"needs {name}>={least} (not installed)"
    nums = lambda v: tuple(int(x) for x in re.findall(r"\d+", v)[:3])  # noqa: E731
    return None if nums(have) >= nums(least) else f"needs {name}>={least} (have {have})"
FENCE = re.compile(r"^(`{3,})(\S*)")
#: Issue 34 item 4: a fenced block of expected output right after an ``sh``
#: block, marked on the line before its fence, is what that block prints on
#: stdout (``...`` alone on a line: any lines; inside a line: any text).
OUTPUT = "<!-- doc-test: output -->"
#: Before a table, list or paragraph (marker lines stack; the passage runs
#: to the next blank line): every number in it is one the command prints (run
#: read-only in the repository, stdout) or one the file holds; a file must be
#: named in the passage (a measured result is checked against the result
#: file it cites). Issue 43: numbers, not only decimals (``passage_numbers``).
NUMBERS = re.compile(r"^\s*<!-- doc-test: numbers from( file)?: (.+?) -->$")
#: Not quantities, blanked before numbers are read: dates, references
#: (issue 15, session 7, runs 1-3, steps 1-3, exit 2), versions (0.33.0),
#: powers (10^12) and ordered-list numbers.
NOT_QUANTITY = re.compile(
    r"\b\d{4}-\d{2}-\d{2}\b"
    r"|\b(?:[Ii]ssues?|[Ss]essions?|[Rr]uns?|[Ss]teps?|[Ii]tems?|[Ss]ections?|[Ee]xit)"
    r" \d+(?:(?: ?[,/-] ?| and | to )\d+)*\b(?!\.\d)"
    r"|\d+(?:\.\d+){2,}|\d+\^\d+|^\s*\d+\. ", re.M)
NUMBER = re.compile(r"\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?")
#: Letters a number may carry and still be a quantity (``20MB``, ``5x``).
UNIT_SUFFIXES = {"B", "KB", "MB", "GB", "TB", "KiB", "MiB", "GiB", "us", "ms", "s",
                 "x", "W"}


def passage_numbers(text: str) -> list[tuple[str, str]]:
    """The quantities of a document passage as ``(sign, digits)`` (sign
    ``+``, ``-`` or ``""``; thousands commas dropped): every number but the
    ``NOT_QUANTITY`` ones, a number in a name (``h200``, ``L2S001-3``,
    ``GLM-5.3``, ``fit-proof-2a``) and a value set with ``=`` in code
    (```L2SCHED_PROGRESS=1```). HTML comments are not read."""
    text = re.sub(r"<!--.*?-->", "", text, flags=re.S)
    text = NOT_QUANTITY.sub(lambda m: " " * len(m.group()), text)
    code = [m.span() for m in re.finditer(r"`[^`\n]*`", text)]
    out = []
    for m in NUMBER.finditer(text):
        a, b = m.span()
        before, after = text[max(0, a - 40):a], text[b:b + 12]
        p = before[-1:] or " "
        if p.isalpha() or p in "_^" or after[:1] == "^" or (
                p == "." and before[-2:-1].isdigit()):
            continue
        word = re.match(r"[A-Za-z_]*", after).group()
        if word and word not in UNIT_SUFFIXES:
            continue
        if p == "-" and re.search(r"[A-Za-z_][\w.]*-$", before):
            continue  # GLM-5.3, L2S001-3, Qwen3-30B
        if p == "=" and any(x <= a < y for x, y in code):
            continue
        signed = p in "+-" and not (before[-2:-1].isalnum() or before[-2:-1] == ")")
        out.append((p if signed else "", m.group().replace(",", "")))
    return out


def source_numbers(text: str) -> set[tuple[str, str]]:
    """Every number of a command's output or a file, read leniently (in
    names too), as ``passage_numbers`` writes them."""
    return {(sign, digits.replace(",", "")) for sign, digits in
            re.findall(r"(?<!\d)(?<!\d\.)([+-]?)(\d+(?:,\d{3})*(?:\.\d+)?)", text)}


def number_found(number: tuple[str, str], found: set) -> bool:
    """A quoted ``(sign, digits)`` is in ``found`` (``source_numbers``):
    the same digits, and a ``-`` quoted only where a ``-`` is printed (an
    unsigned number may be quoted with its sign left to the words)."""
    sign, digits = number
    signs = {"-"} if sign == "-" else {"+", ""} if sign == "+" else {"+", "-", ""}
    return any((s, digits) in found for s in signs)


def shell_blocks(path: Path) -> list[tuple[int, str, str, str | None]]:
    """``(line, info, code, skip reason)`` of every fenced block of
    ``path`` (``line``: the fence's, 1-based)."""
    lines = path.read_text(encoding="utf-8").split("\n")
    out, i = [], 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        end = next(j for j in range(i + 1, len(lines))
                   if lines[j].startswith(m.group(1)) and not lines[j].strip("`"))
        skip = SKIP.match(lines[i - 1]) if i else None
        reason = skip.group(1) if skip else unmet_need(lines[i - 1]) if i else None
        out.append((i + 1, m.group(2), "\n".join(lines[i + 1:end]), reason))
        i = end + 1
    return out


def output_blocks(path: Path) -> dict[int, tuple[int, str]]:
    """``{sh block line: (output block line, expected text)}``: each block
    marked ``OUTPUT`` with the ``sh`` block before it (no other fenced block
    between them)."""
    lines = path.read_text(encoding="utf-8").split("\n")
    out, prev_sh = {}, None
    for line, info, code, _skip in shell_blocks(path):
        if line >= 2 and lines[line - 2] == OUTPUT:
            assert prev_sh is not None and prev_sh not in out, (
                f"{path.name}:{line}: an output block follows no sh block of its own")
            assert info in ("", "text"), f"{path.name}:{line}: output block is ```{info}"
            out[prev_sh] = (line, code)
            prev_sh = None
        else:
            prev_sh = line if info == "sh" else None
    return out


def output_matches(expected: str, got: str) -> bool:
    """``got`` (a command's stdout) is ``expected`` with its ``...``
    wildcards; trailing blanks of a line and final newlines do not count."""
    pat = []
    for ln in expected.rstrip("\n").split("\n"):
        if ln.strip() == "...":
            pat.append(r"(?:[^\n]*\n)*?")
        else:
            pat.append(".*?".join(map(re.escape, ln.rstrip().split("..."))) + r"\n")
    norm = "".join(ln.rstrip() + "\n" for ln in got.rstrip("\n").split("\n"))
    return re.fullmatch("".join(pat), norm) is not None


def passages(path: Path) -> list[tuple[int, list[tuple[str, str]], str]]:
    """``(line, markers, text)`` of every passage of ``path``: its runs of
    non-blank lines (a fenced block whole), ``markers`` the ``NUMBERS``
    lines that open it as ``("cmd" | "file", what)``, ``text`` the rest and
    ``line`` the text's first line (1-based)."""
    lines = path.read_text(encoding="utf-8").split("\n")
    out, i = [], 0
    while i < len(lines):
        if not lines[i].strip():
            i += 1
            continue
        j, fence = i, None
        while j < len(lines) and (fence or lines[j].strip()):
            m = FENCE.match(lines[j])
            if m and (fence is None or (lines[j].startswith(fence)
                                        and not lines[j].strip("`"))):
                fence = None if fence else m.group(1)
            j += 1
        block, markers, k = lines[i:j], [], 0
        while k < len(block) and NUMBERS.match(block[k]):
            m = NUMBERS.match(block[k])
            markers.append(("file" if m.group(1) else "cmd", m.group(2)))
            k += 1
        out.append((i + k + 1, markers, "\n".join(block[k:])))
        i = j
    return out


def numbered_passages(path: Path) -> list[tuple[int, list[tuple[str, str]], str]]:
    """The ``passages`` of ``path`` that have a ``NUMBERS`` marker."""
    return [p for p in passages(path) if p[1]]


def _sh_docs():
    return [p for p in DOCS if any(info == "sh" for _l, info, _c, _s in shell_blocks(p))]


def test_item13_shell_blocks_are_fenced_sh():
    """Every shell block is ``sh`` (so this test sees it), and every skip
    marker sits on an ``sh`` block and gives a reason."""
    bad = [f"{p.relative_to(ROOT)}:{line}: ```{info}"
           for p in DOCS for line, info, _c, _s in shell_blocks(p)
           if info in ("bash", "shell", "console", "zsh")]
    assert bad == [], "write shell blocks as ```sh"
    for p in DOCS:
        for line, info, _c, skip in shell_blocks(p):
            if skip is not None:
                assert info == "sh" and skip.strip(), f"{p}:{line}"


def _copy(tmp: Path) -> Path:
    dst = tmp / "repo"
    shutil.copytree(ROOT, dst, ignore=shutil.ignore_patterns(
        ".git", ".venv", "__pycache__", "*.egg-info", "build", "dist",
        ".pytest_cache", ".hypothesis", ".whl"))
    bin_dir = tmp / "bin"
    bin_dir.mkdir()
    # Nothing a block runs may install anything or reach a server: pip is
    # only there to build a wheel, vllm not at all (mark such blocks skip).
    refuse = ('echo "doc-test: $0 $* is not run here; mark the block with '
              '<!-- doc-test: skip: REASON -->" >&2; exit 97')
    python = (f'if [ "$1" = "-m" ] && [ "$2" = "pip" ] && [ "$3" != "wheel" ]; then '
              f'{refuse}; fi\nexec "{sys.executable}" "$@"')
    for name, body in (("l2sched", f'exec "{sys.executable}" -m l2sched "$@"'),
                       ("python", python), ("python3", python), ("pip", refuse),
                       ("pip3", refuse), ("uv", refuse), ("vllm", refuse)):
        f = bin_dir / name
        f.write_text(f"#!/bin/sh\n{body}\n")
        f.chmod(0o755)
    return dst


@pytest.mark.parametrize("doc", _sh_docs(), ids=lambda p: str(p.relative_to(ROOT)))
def test_item13_doc_shell_commands_run(doc, tmp_path):
    blocks = [b for b in shell_blocks(doc) if b[1] == "sh"]
    runnable = [b for b in blocks if b[3] is None]
    if not runnable:
        pytest.skip("; ".join(f"line {b[0]}: {b[3]}" for b in blocks))
    repo = _copy(tmp_path)
    outputs = output_blocks(doc)
    unrun = [ln for ln in outputs if ln not in {b[0] for b in runnable}]
    assert unrun == [], f"{doc.name}: output quoted for skipped blocks at lines {unrun}"
    got_dir = tmp_path / "stdout"
    got_dir.mkdir()
    script = ["set -e"]
    for line, _info, code, _skip in runnable:
        script += [f"echo '### {doc.name}:{line}' >&2"]
        script += ([f"{{\n{code}\n}} > '{got_dir / str(line)}'"] if line in outputs
                   else [code])
    env = {k: v for k, v in os.environ.items() if not k.startswith("L2SCHED_")}
    env.update(PATH=f"{tmp_path / 'bin'}{os.pathsep}{env.get('PATH', '')}",
               PYTHONPATH=str(repo), HOME=str(tmp_path), PYTHONDONTWRITEBYTECODE="1",
               PYTHONNOUSERSITE="1", PIP_NO_INDEX="1", PIP_NO_INPUT="1")
    r = subprocess.run(["bash", "-c", "\n".join(script)], cwd=repo, env=env,
                       capture_output=True, text=True, timeout=600)
    where = [ln for ln in r.stderr.splitlines() if ln.startswith("### ")]
    assert r.returncode == 0, (f"{where[-1] if where else doc.name}: exit "
                               f"{r.returncode}\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}")
    for line, (out_line, expected) in outputs.items():
        got = (got_dir / str(line)).read_text()
        assert output_matches(expected, got), (
            f"{doc.name}:{out_line}: the block of line {line} printed\n{got}\n"
            f"which is not the quoted output\n{expected}")
    skipped = [b for b in blocks if b[3] is not None]
    for line, _i, _c, reason in skipped:  # say what was not run, and why
        print(f"{doc.name}:{line}: not run: {reason}")


def test_item13_doc_test_installs_nothing(tmp_path):
    """The doc-test's shell refuses every install (an unmarked install
    block fails the test instead of changing an environment)."""
    _copy(tmp_path)
    env = dict(os.environ, PATH=f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    for cmd in ("pip install lark", "python -m pip install lark", "pip3 --version",
                "vllm serve x", "python3 -m pip uninstall -y lark"):
        r = subprocess.run(["bash", "-c", cmd], env=env, capture_output=True,
                           text=True, timeout=60)
        assert r.returncode == 97 and "doc-test:" in r.stderr, (cmd, r.stderr)


def test_item13_vllm_install_works_from_a_checkout():
    """No install line that needs the package on an index: the docs say
    how to install from the checkout or a wheel built from it."""
    text = (ROOT / "docs" / "vllm.md").read_text()
    assert "pip install 'l2sched[" not in text and 'pip install "l2sched[' not in text
    assert "pip install -e '.[vllm,gpu]'" in text
    assert "python -m pip wheel --no-deps --no-build-isolation -w dist ." in text


# --------------------------------------------------------------------------
# item 17: the documented CLI exists and prints what the docs say


def _cli(*args, cwd=ROOT):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "l2sched", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=300, env=env)


@pytest.fixture(scope="module")
def plan_json(tmp_path_factory):
    out = tmp_path_factory.mktemp("plan") / "plan.json"
    r = _cli("compile", "schedules/glm53-flash-sm120-tp4.l2s", "-o", str(out))
    assert r.returncode == 0, r.stderr
    return out


def _reasons(stdout: str) -> dict[str, set]:
    got: dict[str, set] = {}
    for ln in stdout.splitlines()[1:]:
        parts = ln.split()
        if len(parts) > 1 and parts[1] in ("launch", "skip"):
            got.setdefault(parts[1], set()).add(parts[-1])
    return got


@pytest.mark.parametrize("args, want", [
    ([], {"launch": {"eager"}}),
    (["--graph-mode", "full", "--capturing"], {"launch": {"full-capture"}}),
    (["--graph-mode", "piecewise", "--capturing"], {"skip": {"piecewise-capture"}}),
    (["--graph-mode", "piecewise"], {"launch": {"eager"}}),
    (["--tokens", "300"], {"skip": {"too-many-tokens"}}),
])
def test_item17_explain_graph_mode_and_capturing(plan_json, args, want):
    """docs/runtime.md: ``l2sched explain PLAN.json [--tokens N]
    [--graph-mode eager|full|piecewise] [--capturing]``."""
    r = _cli("explain", str(plan_json), "--layer", "3", *args)
    assert r.returncode == 0, r.stderr
    assert _reasons(r.stdout) == want, r.stdout
    doc = (ROOT / "docs" / "runtime.md").read_text()
    assert "[--graph-mode eager|full|piecewise] [--capturing]" in doc


def test_item17_explain_shows_the_left_over_bytes(plan_json):
    """docs/language.md: the left-over is shown by compile and explain."""
    plan = json.loads(plan_json.read_text())
    total = sum(lo["nbytes"] for lo in plan["left_over"])
    assert total > 0
    for target in (str(plan_json), "schedules/glm53-flash-sm120-tp4.l2s"):
        r = _cli("explain", target, "--layer", "3")
        assert r.returncode == 0, r.stderr
        last = r.stdout.splitlines()[-1]
        assert last.startswith("left over (no window could take), per decode step: "
                               f"{total:,} B"), last
        assert "A_MLA" in last and "self_attn.o_proj.weight" in last
    assert "shown by `l2sched compile` and `l2sched explain`" in (
        ROOT / "docs" / "language.md").read_text()


def test_item17_language_states_one_line_ending_rule(tmp_path):
    """Every statement of docs/language.md about what ends a line names the
    three line ends the one line splitter (``errors.source_lines``) uses,
    and a CR-only file reports errors on the line the reader counts."""
    from l2sched.errors import source_lines

    text = (ROOT / "docs" / "language.md").read_text()
    said = [s for s in re.split(r"(?<=\.)\s", text)
            if re.search(r"[Ll]ines (are counted|end)", s)]
    assert said, "no line-ending rule found"
    for s in said:
        assert "`\\n`" in s and "`\\r\\n`" in s and "`\\r`" in s, s
        assert " only" not in s, s
    assert source_lines("a\rb\r\nc\nd") == ["a", "b", "c", "d"]
    src = (ROOT / "schedules" / "glm53-flash-sm120-tp4.l2s").read_text()
    bad = src.replace("budget 36MB", "budget 36").replace("\n", "\r")
    p = tmp_path / "cr.l2s"
    p.write_bytes(bad.encode())
    r = _cli("check", str(p))
    line = next(i for i, ln in enumerate(src.split("\n"), 1) if "budget 36MB" in ln)
    assert f"cr.l2s:{line}:" in r.stderr, r.stderr


def test_item17_vllm_retune_uses_one_set_of_overrides():
    """The retune example lints, serves and sets the environment with the
    same overrides, and they are exactly the shipped 300 W schedule's; its
    story is a TP4 box."""
    from l2sched.lang.resolve import load_schedule
    from l2sched.vllm.config import parse_set_env

    text = (ROOT / "docs" / "vllm.md").read_text()
    sec = text[text.index("## Retune a box with `set`"):]
    sec = sec[:sec.index("\n## ", 5)]
    assert "3 GPUs" not in sec and "4 GPUs" in sec
    lint = " ".join(re.findall(r"^l2sched lint .*?(?<!\\)$", sec, re.M | re.S))
    lint_sets = re.findall(r"--set (\S+)", lint)
    serve = re.search(r'--additional-config \\\n\s*"((?:[^"\\]|\\.)*)"', sec).group(1)
    serve = json.loads(serve.replace('\\"', '"').replace("$SCHED", "x"))
    serve_sets = [f"{k}={v}" for k, v in serve["l2sched"]["set"].items()]
    env_sets = list(parse_set_env(re.search(r'L2SCHED_SET="([^"]+)"', sec).group(1)))
    assert lint_sets and sorted(lint_sets) == sorted(serve_sets) == sorted(env_sets)
    base = "schedules/glm53-flash-sm120-tp4.l2s"
    tuned = load_schedule(base, lint_sets)
    shipped = load_schedule("schedules/glm53-flash-sm120-tp4-300w.l2s")
    assert [(w.name, w.budget) for w in tuned.windows] == [
        (w.name, w.budget) for w in shipped.windows]


def test_item17_lint_md_examples_are_tool_output():
    """The L2S106 and L2S201 examples of docs/lint.md quote a finding the
    lint prints for the example's command (generated by ``l2sched docs
    lint``)."""
    from l2sched.cli.docs import rule_example_output
    from l2sched.lint.rules import RULES

    doc = (ROOT / "docs" / "lint.md").read_text()
    for code in ("L2S106", "L2S201"):
        rule = RULES[code]
        assert rule.example_command, code
        message = rule_example_output(rule)
        assert message and f"`{rule.example_command}` prints: `{message}`" in doc, code


def test_item17_python_examples_import():
    """Every ``from l2sched... import ...`` of a ``python`` block in the
    documents names a module and names that exist."""
    import importlib

    bad = []
    for p in DOCS:
        for line, info, code, _s in shell_blocks(p):
            if info != "python":
                continue
            for m in re.finditer(r"^from (l2sched[\w.]*) import ([^\n#]+)$", code, re.M):
                try:
                    mod = importlib.import_module(m.group(1))
                except ImportError as e:
                    bad.append(f"{p.name}:{line}: {m.group(0)} ({e})")
                    continue
                for name in (n.strip() for n in m.group(2).split(",")):
                    if not hasattr(mod, name):
                        bad.append(f"{p.name}:{line}: {m.group(1)} has no {name}")
    assert bad == []


def _resolves(dotted: str) -> bool:
    import importlib

    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for name in parts[i:]:
            if not hasattr(obj, name):
                return False
            obj = getattr(obj, name)
        return True
    return False


def test_item17_code_references_exist():
    """Every ``l2sched.MODULE[.NAME]`` (not a logger name) and every
    repository path the documents quote exists: a reference left behind by
    a move is an example that no longer comes from the code."""
    bad = []
    for p in DOCS:
        text = p.read_text(encoding="utf-8")
        for m in re.finditer(r"(?<!logger )`(l2sched(?:\.[A-Za-z_]\w*)+)(?:\(\))?`", text):
            if not _resolves(m.group(1)):
                bad.append(f"{p.name}: {m.group(1)}")
        for m in re.finditer(r"`((?:l2sched|tests|docs|schedules|benchmarks|grammar)"
                             r"/[^`\s:]*)", text):
            path = m.group(1).split("#", 1)[0]  # a section anchor is not a path
            if re.search(r"[*<>{}]|NAME|\.\.\.", path):
                continue
            if not (ROOT / path).exists():
                bad.append(f"{p.name}: {path}")
    assert bad == []


def test_item17_language_hook_table_is_the_adapters():
    """docs/language.md's hook table lists the adapter's hook points with
    their order and description."""
    from l2sched.model.adapters.glm5next import HOOKS

    text = (ROOT / "docs" / "language.md").read_text()
    rows = re.findall(r"^\| `([a-z_.]+)` \| (\d+) \| (.+?) \| .+? \|$", text, re.M)
    assert [(n, int(o), d) for n, o, d in rows] == [
        (h.name, h.order, h.description) for h in HOOKS]


def quoted_excerpts() -> list[tuple[str, int, str, list[str]]]:
    """``(doc, line, schedule file, lines)`` of every fenced block of the
    documents whose first line is ``# schedules/NAME.l2s...``: an excerpt
    of that shipped file (``lines``: its lines that are neither blank nor
    comments)."""
    out = []
    for p in DOCS:
        for line, _info, code, _s in shell_blocks(p):
            first, *rest = code.split("\n")
            m = re.match(r"# (schedules/[\w.-]+\.l2s)\b", first)
            if m:
                out.append((p.name, line, m.group(1),
                            [ln for ln in rest if ln.strip() and not ln.lstrip().startswith("#")]))
    return out


def test_issue43_quoted_schedule_lines_are_in_the_file():
    """An excerpt a document attributes to a shipped schedule quotes only
    lines of that file (docs/language.md's 300 W example had a ``set
    policy`` line the file does not have)."""
    excerpts = quoted_excerpts()
    assert any(f.endswith("-300w.l2s") for _d, _l, f, _x in excerpts)
    bad = []
    for doc, line, name, lines in excerpts:
        have = {ln.strip() for ln in (ROOT / name).read_text(encoding="utf-8").splitlines()}
        bad += [f"{doc}:{line}: {ln.strip()!r} is not a line of {name}"
                for ln in lines if ln.strip() not in have]
    assert bad == []


def _size_rows() -> list[tuple[str, str]]:
    """``(message, example)`` of the error-table rows of docs/language.md
    whose example is a ``budget`` or ``set_aside`` value (the first message
    of a row is the example's)."""
    text = (ROOT / "docs" / "language.md").read_text(encoding="utf-8")
    return re.findall(r"^\| `([^`]+)`.*\| `((?:budget|set_aside) [^`]+)` \| [^|]+ \|$", text,
                      re.M)


@pytest.mark.parametrize("message, example", _size_rows())
def test_issue43_language_size_errors_are_the_tools(message, example, tmp_path, capsys):
    """Each size error docs/language.md quotes is what ``l2sched check``
    prints for its example (the limit said ``1 TB`` where the tool says
    ``1000GB``: there is no TB unit to write)."""
    from l2sched.cli import main

    text = (ROOT / "schedules" / "glm53-flash-sm120-tp4.l2s").read_text(encoding="utf-8")
    if example.startswith("budget "):
        assert text.count(" budget 20MB ") == 1
        text = text.replace(" budget 20MB ", f" {example} ")
    else:
        text = re.sub(r"^(device .*)$", lambda m: f"{m.group(1)}\n{example}", text,
                      count=1, flags=re.M)
    path = tmp_path / "sizes.l2s"
    path.write_text(text, encoding="utf-8")
    assert main(["check", str(path)]) == 1
    err = capsys.readouterr().err
    assert message in err, err


def test_issue43_size_rows_are_found():
    rows = dict((e, m) for m, e in _size_rows())
    assert {"budget 20", "budget 2000GB", "budget 1e30MB", "set_aside 5"} <= set(rows)


def synopses() -> list[tuple[str, int, str, str]]:
    """``(doc, line, command, text)`` of every synopsis in the documents: a
    line of a plain fenced block that starts ``l2sched COMMAND``, with its
    indented continuation lines, less a trailing ``# comment``."""
    out = []
    for p in DOCS:
        for line, info, code, _s in shell_blocks(p):
            if info not in ("", "text"):
                continue
            cur = None
            for k, ln in enumerate(code.split("\n")):
                m = re.match(r"l2sched ([a-z]+)\b", ln)
                if m:
                    cur = [p.name, line + 1 + k, m.group(1), ln]
                    out.append(cur)
                elif cur is not None and ln[:1].isspace() and ln.strip():
                    cur[3] += " " + ln.strip()
                else:
                    cur = None
    return [(d, n, c, re.sub(r"\s+#.*$", "", t)) for d, n, c, t in out]


def _subparser(command: str):
    """The argparse parser of ``l2sched COMMAND``."""
    import argparse

    from l2sched.cli.main import build_parser

    return next(a for a in build_parser([command])._actions
                if isinstance(a, argparse._SubParsersAction)).choices[command]


def synopsis_problems(command: str, text: str) -> tuple[list[str], set]:
    """What synopsis ``text`` of ``l2sched COMMAND`` says that its argparse
    parser does not: an unknown option, a flag shown with a value or an
    option without one, other choices than ``a|b|c`` lists, a single value
    where the option takes a comma-separated list (``M[,M...]``) or the
    other way round. Also the ``dest`` of every option it names."""
    sub = _subparser(command)
    bad, seen = [], set()
    for m in re.finditer(r"(?<![\w-])(--?[A-Za-z][\w-]*)(?:[ =]([^\s\[\]]+(?:\[[^\]]*\])?))?",
                         text):
        opt, value = m.groups()
        value = None if value is None or value.startswith("-") else value
        action = sub._option_string_actions.get(opt)
        if action is None:
            bad.append(f"{opt}: no such option")
            continue
        seen.add(action.dest)
        if (action.nargs != 0) != (value is not None):
            bad.append(f"{opt} {value or ''}: the option takes "
                       f"{'a value' if action.nargs != 0 else 'none'}")
        elif value is not None and action.choices:
            if set(value.split("|")) != {str(c) for c in action.choices}:
                bad.append(f"{opt} {value}: the choices are {'|'.join(action.choices)}")
        elif value is not None:
            metavar = action.metavar or action.dest.upper()
            if ("," in value) != ("," in metavar):
                bad.append(f"{opt} {value}: the option takes {metavar}")
    return bad, seen


def test_issue43_synopses_match_the_cli():
    """Every synopsis of the documents names options the command has, each
    with the value shape of its ``--help`` (docs/lint.md said ``--tokens N``
    for ``lint``, which takes ``M[,M...]``); the fullest synopsis of each
    command names every option."""
    problems, fullest = [], {}
    for doc, line, command, text in synopses():
        bad, seen = synopsis_problems(command, text)
        problems += [f"{doc}:{line}: l2sched {command} {b}" for b in bad]
        if len(seen) > len(fullest.get(command, (None, set()))[1]):
            fullest[command] = (f"{doc}:{line}", seen)
    assert {"lint", "timeline", "fit", "inventory", "check", "fmt"} <= set(fullest)
    for command, (where, seen) in fullest.items():
        problems += [f"{where}: l2sched {command}: {a.option_strings[-1]} is not in the "
                     f"synopsis" for a in _subparser(command)._actions
                     if a.option_strings and a.dest not in seen and a.dest != "help"]
    assert problems == []


def test_issue43_synopsis_check_finds_a_wrong_shape():
    assert synopsis_problems("lint", "l2sched lint S [--tokens N]")[0] == [
        "--tokens N: the option takes M[,M...]"]
    assert synopsis_problems("lint", "l2sched lint S [--no-summary x]")[0] != []
    assert synopsis_problems("fit", "l2sched fit [--kernel bulk|copy]")[0] != []
    assert synopsis_problems("lint", "l2sched lint S [--tokens M[,M...]] [--no-summary]") == (
        [], {"tokens", "no_summary"})


def test_issue43_lint_tokens_json_is_one_document_as_documented():
    """``lint --tokens 1,4 --format json`` prints one document with one
    ``schedules`` entry per M (each with its ``tokens``), as docs/lint.md
    and the CLI's docstring say; README says so too (it said "one document
    per M")."""
    r = _cli("lint", "schedules/glm53-flash-sm120-tp4.l2s", "--tokens", "1,4",
             "--format", "json")
    doc = json.loads(r.stdout)
    assert set(doc) == {"schedules", "errors"}
    assert [d["tokens"] for d in doc["schedules"]] == [1, 4]
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert '# one report per M (JSON: {"schedules": [one per M], ...})' in readme
    assert "one document per M" not in readme
    lint_md = " ".join((ROOT / "docs" / "lint.md").read_text(encoding="utf-8").split())
    assert ('the JSON one document per schedule and M in that same `{"schedules": [...], '
            '"errors": N}` (each with its `tokens`)') in lint_md


# --------------------------------------------------------------------------
# issue 34 item 4: every number a document quotes from a command is checked
# issue 43: every number of docs/fit.md and of README's shipped-schedule
# table is checked, against the command or the result file it comes from

#: Documents, or one section of one (by its heading), whose every number is
#: checked: in a passage under a ``NUMBERS`` marker, or in an ``sh`` block
#: the doc-test runs or its quoted output. Outside those, a bare 0 or 1 is
#: not counted (``exit 0``, ``TP > 1``, an effect of 0: logic, not a
#: quantity that can go stale).
EVERY_NUMBER = {"docs/fit.md": None, "README.md": "## Shipped schedules"}
_SOURCES: dict = {}


def number_source(kind: str, what: str) -> str:
    """The text a marker's numbers come from: the stdout of command
    ``what`` (``kind`` ``cmd``, run once per test session in the repository
    with this interpreter first on ``PATH``; it must exit 0) or the files
    ``what`` names (``file``: paths from the repository root, ``.gz`` read
    decompressed)."""
    if (kind, what) in _SOURCES:
        return _SOURCES[kind, what]
    if kind == "file":
        import gzip
        paths = [ROOT / w for w in what.split()]
        text = "\n".join((gzip.open(p, "rt", encoding="utf-8") if p.suffix == ".gz"
                          else open(p, encoding="utf-8")).read() for p in paths)
    else:
        env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}"
                   f"{os.environ['PATH']}", PYTHONPATH=str(ROOT))
        r = subprocess.run(["bash", "-c", what], cwd=ROOT, env=env, capture_output=True,
                           text=True, timeout=300)
        assert r.returncode == 0, f"`{what}` exit {r.returncode}: {r.stderr[-2000:]}"
        text = r.stdout
    _SOURCES[kind, what] = text
    return text


def _numbered():
    out = []
    for p in DOCS:
        prev = ""
        for line, markers, text in passages(p):
            if markers:
                out.append((p, line, markers, text, prev))
            prev = text
    return out


@pytest.mark.parametrize("doc, line, markers, passage, before", _numbered(),
                         ids=lambda v: v.name if isinstance(v, Path) else str(v)[:20])
def test_item34_quoted_numbers_come_from_their_command(doc, line, markers, passage, before):
    """A passage marked ``<!-- doc-test: numbers from: CMD -->`` or
    ``<!-- doc-test: numbers from file: PATH -->`` (stacked: any of them)
    quotes only numbers that ``CMD`` prints or ``PATH`` holds, and it (or
    the passage before it, a table's caption) names every ``PATH`` it
    quotes."""
    found: set = set()
    for kind, what in markers:
        found |= source_numbers(number_source(kind, what))
        if kind == "file":
            unnamed = [w for w in what.split() if Path(w).name not in passage + before]
            assert unnamed == [], f"{doc.name}:{line}: the passage does not cite {unnamed}"
    quoted = passage_numbers(passage)
    assert quoted, f"{doc.name}:{line}: no number in the marked passage"
    missing = sorted({s + d for s, d in quoted if not number_found((s, d), found)})
    assert missing == [], (f"{doc.name}:{line}: {[w for _k, w in markers]} "
                           f"do not give {missing}")


def unchecked_numbers(path: Path, section: str | None = None) -> list[str]:
    """``LINE: numbers`` of each passage of ``path`` (of its ``section``:
    from that heading to the next of its level) with a quantity no check
    covers (see ``EVERY_NUMBER``)."""
    run = {line for line, info, _c, skip in shell_blocks(path) if info == "sh" and not skip}
    quoted = {out_line for out_line, _text in output_blocks(path).values()}
    lines = path.read_text(encoding="utf-8").split("\n")
    lo, hi = 1, len(lines)
    if section is not None:
        lo = lines.index(section) + 1
        level = section.split(" ")[0] + " "
        hi = next((i for i in range(lo + 1, len(lines) + 1)
                   if lines[i - 1].startswith(level)), len(lines) + 1) - 1
    bad = []
    for line, markers, text in passages(path):
        if not lo <= line <= hi or markers:
            continue
        fence = next((line + k for k, ln in enumerate(text.split("\n"))
                      if FENCE.match(ln)), None)
        if fence in run or fence in quoted:
            continue
        nums = [s + d for s, d in passage_numbers(text) if s or d not in ("0", "1")]
        if nums:
            bad.append(f"{line}: {', '.join(nums)}")
    return bad


@pytest.mark.parametrize("doc, section", sorted(EVERY_NUMBER.items()))
def test_issue43_every_number_is_checked(doc, section):
    """Every number of docs/fit.md and of README's shipped-schedule table
    is under a ``NUMBERS`` marker (checked by
    ``test_item34_quoted_numbers_come_from_their_command``) or in a block the
    doc-test runs: none can go stale unseen (the H200 fit's bound and the
    shipped schedule's predicted gain did)."""
    bad = unchecked_numbers(ROOT / doc, section)
    assert bad == [], (f"{doc}: numbers no check covers (mark the passage with "
                       f"<!-- doc-test: numbers from: CMD --> or numbers from file: "
                       f"PATH):\n" + "\n".join(bad))


@pytest.mark.parametrize("text, want", [
    ("-0.9 us against 69.5 us (+28.2 before)", ["-0.9", "69.5", "+28.2"]),
    ("M = 1 / 4 / 16 / 64, 0.3-2.6% and +25..+67 us", ["1", "4", "16", "64", "0.3",
                                                       "2.6", "+25", "+67"]),
    ("GLM-5.3-Flash on h200 (L2S001-3, fit-proof-2a.md, 2026-12-01, vllm 0.33.0)", []),
    ("issue 15, session 7, runs 1-3, exit 2, 10^12 B and 49,980 more; a 36MB window",
     ["49980", "36"]),
    ("`L2SCHED_PROGRESS=1` at M=64", ["64"]),
    ("1. **Caps**: x 1.25", ["1.25"]),
])
def test_issue43_passage_numbers(text, want):
    assert [s + d for s, d in passage_numbers(text)] == want


def test_issue43_a_stale_number_is_found():
    """A quoted number the source does not print fails, a sign flip too."""
    found = source_numbers("M=1: median -201.7 us, lower bound +332.5 us (0.3-2.6%)")
    assert number_found(("-", "201.7"), found) and number_found(("", "201.7"), found)
    assert not number_found(("-", "56.0"), found)
    assert not number_found(("+", "201.7"), found)
    assert number_found(("+", "332.5"), found) and not number_found(("-", "332.5"), found)
    assert number_found(("", "2.6"), found)


@pytest.mark.parametrize("expected, got, ok", [
    ("a\nb", "a\nb\n", True),
    ("a\n...\nd", "a\nb\nc\nd\n", True),
    ("a\n...\nd", "a\nd", True),
    ("x = ... us", "x = 4.5 us  \n", True),
    ("a\nb", "a\nc\n", False),
    ("a", "a\nb\n", False),
    ("1.5: 53.4 us", "1.5: 60.9 us", False),
])
def test_item34_output_blocks_match_with_wildcards(expected, got, ok):
    assert output_matches(expected, got) is ok


def test_item34_markers_are_used_and_well_placed():
    """Output blocks follow their ``sh`` block; the issue's numbers are
    under a marker (inventory MiB table, the fit tables and counts, the
    calibrate grid, README's failing example)."""
    for p in DOCS:
        output_blocks(p)  # asserts placement
    marked = {p.name: len(output_blocks(p)) + len(numbered_passages(p)) for p in DOCS}
    for name in ("README.md", "inventory.md", "fit.md", "bench.md"):
        assert marked[name] > 0, name


def test_item34_a_block_that_needs_what_is_missing_is_skipped_with_why():
    """README's test command runs on a plain ``pip install -e '.[test]'``:
    a block marked ``needs:`` a module or version this environment lacks is
    skipped with the reason, and runs where the need is met."""
    assert unmet_need("<!-- doc-test: needs: json -->") is None
    assert unmet_need("<!-- doc-test: needs: no_such_module_l2s -->") == \
        "needs no_such_module_l2s (not importable)"
    assert unmet_need("<!-- doc-test: needs: pytest>=1 -->") is None
    assert "have " in unmet_need("<!-- doc-test: needs: pytest>=9999 -->")
    assert unmet_need("<!-- doc-test: needs: no_such_dist_l2s>=1 -->") == \
        "needs no_such_dist_l2s>=1 (not installed)"
    assert unmet_need("<!-- doc-test: skip: x -->") is None  # not a needs: line
    blocks = {line: reason for line, _i, _c, reason in shell_blocks(ROOT / "docs" / "bench.md")}
    import importlib.util
    tp_dry = next(line for line, _i, code, _r in shell_blocks(ROOT / "docs" / "bench.md")
                  if "bench tp --dry" in code)
    want = None if importlib.util.find_spec("torch") else "needs torch (not importable)"
    assert blocks[tp_dry] == want
