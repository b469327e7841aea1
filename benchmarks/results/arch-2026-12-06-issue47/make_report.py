"""Writes /tmp/m47/metrics.md from the outputs of run_all.sh:
before.json / after.json (ast_metrics.py), cli_before.json / cli_after.json
(cli_options.py), bytes_before.txt / bytes_after.txt (tracked_bytes.sh),
dp_flow_before.txt / dp_flow_after.txt (dp_names_flow.py)."""
from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

D = Path("/tmp/m47")
T = ("before", "after")
ast_ = {t: json.loads((D / f"{t}.json").read_text()) for t in T}
cli = {t: json.loads((D / f"cli_{t}.json").read_text()) for t in T}
byt = {t: (D / f"bytes_{t}.txt").read_text().splitlines() for t in T}
flow = {t: (D / f"dp_flow_{t}.txt").read_text().splitlines() for t in T}
commits = {t: (D / f"commit_{t}.txt").read_text().strip() for t in T}

out: list[str] = []
w = out.append


def short(n: str) -> str:
    return n.replace("l2sched.", "")


w("# l2sched architecture metrics: before (2af54cc) vs after (main)\n")
w(f"- before: `{commits['before']}`\n- after (main): `{commits['after']}`\n")
w("Note: `main` was 81d022e when the worktrees were made; while this ran, another commit landed on main "
  "(b5724d7, touching lab/experiments/tax_bisect.py and tests/test_lab_tax_bisect.py only; "
  "`git diff 81d022e b5724d7 -- l2sched` is empty). Metrics 1-4 and 6 read only l2sched/ and are the same for "
  "b5724d7. Metric 5 at b5724d7 (measured separately, bytes_main_now_b5724d7.txt): 687 files, 10,140,275 bytes "
  "(+479 vs 81d022e), same 5 largest text files. Everything below is 81d022e.\n")
w("Scripts: /tmp/m47/run_all.sh (runs everything), ast_metrics.py (1, 2, 3, 6A), "
  "cli_options.py (4), tracked_bytes.sh (5), dp_names_flow.py (6C), make_report.py (this file).\n")

# ------------------------------------------------------------------ 1
w("## 1. Import graph of l2sched's first-level nodes\n")
w("| | before | after |\n|---|---|---|")
g = {t: ast_[t] for t in T}
w(f"| nodes (subpackages + top-level modules) | {g['before']['graph_all']['nodes']} | {g['after']['graph_all']['nodes']} |")
for key, label in (("graph_all", "all imports (any nesting, incl. TYPE_CHECKING)"),
                   ("graph_top", "top-level imports only (not in a def, not under `if TYPE_CHECKING`)")):
    b, a = g["before"][key], g["after"][key]
    w(f"| **{label}**: edges between distinct nodes | {b['edges']} | {a['edges']} |")
    w(f"| {label}: cycles (`nx.simple_cycles`) | {b['simple_cycles']} ({'yes' if b['has_cycles'] else 'none'}) | "
      f"{a['simple_cycles']} ({'yes' if a['has_cycles'] else 'none'}) |")
    w(f"| {label}: non-trivial SCCs | {len(b['nontrivial_sccs'])} | {len(a['nontrivial_sccs'])} |")
    w(f"| {label}: floors = longest path of the condensation DAG (nodes) | **{b['floors']}** | **{a['floors']}** |")
w("")
for t in T:
    p = " → ".join("/".join(short(x) for x in c) for c in g[t]["graph_all"]["longest_path"])
    w(f"- {t}, one longest path (all imports; the top-level one is the same): {p}")
w(f"- edges present only through in-function imports: before {json.dumps({k: v for k, v in g['before']['edges_only_in_functions_or_tc'].items()})}; "
  f"after {json.dumps(g['after']['edges_only_in_functions_or_tc']) or 'none'}")
for t in T:
    w(f"- {t}, cross-check with grimp (`grimp_check.py`): " + (D / f"grimp_{t}.txt").read_text().strip())
w("- `l2sched.data` has no imports in or out (an `__init__.py` only): an isolated node, counted in the nodes.")
w("- Without the `l2sched.__main__` node (a 7-line wrapper over `cli`) the floors are 12 (before) and 10 (after), "
  "for both import sets (computed with the same edges, node removed).")
w("- Same trees, `lint-imports --no-cache` (import-linter, PYTHONPATH=tree): before 3 contracts kept, 0 broken "
  "(172 files, 651 dependencies); after 4 kept, 0 broken (204 files, 800 dependencies; the after tree adds the "
  "contract 'the serving plugin never imports the measuring wing'). Its layers contract lists 13 rows before, 12 after.\n")

# ------------------------------------------------------------------ 2
w("## 2. Lines of .py code per first-level node\n")
w("| | before | after |\n|---|---|---|")
tot = {t: ast_[t]["lines_total"] for t in T}
sl = {t: ast_[t]["lines_total_sloc"] for t in T}
lar = {t: ast_[t]["lines_per_node"][0] for t in T}
w(f"| l2sched total physical lines (.py) | {tot['before']} | {tot['after']} |")
w(f"| l2sched total non-blank, non-comment-only lines | {sl['before']} | {sl['after']} |")
w(f"| largest subpackage | **{short(lar['before'][0])}**: {lar['before'][1]} lines = "
  f"**{100 * lar['before'][1] / tot['before']:.1f} %** | **{short(lar['after'][0])}**: {lar['after'][1]} lines = "
  f"**{100 * lar['after'][1] / tot['after']:.1f} %** |")
sub = {t: [x for x in ast_[t]["lines_per_node"]] for t in T}
for i in range(5):
    cells = []
    for t in T:
        n, c = sub[t][i]
        cells.append(f"{short(n)} {c} ({100 * c / tot[t]:.1f} %)")
    w(f"| #{i + 1} | {cells[0]} | {cells[1]} |")
slo = {t: ast_[t]["sloc_per_node"][0] for t in T}
w(f"| largest by non-blank non-comment lines | {short(slo['before'][0])} {slo['before'][1]} "
  f"({100 * slo['before'][1] / sl['before']:.1f} %) | {short(slo['after'][0])} {slo['after'][1]} "
  f"({100 * slo['after'][1] / sl['after']:.1f} %) |")
w("")
for t in T:
    w(f"- {t}, every node: " + ", ".join(f"{short(n)} {c}" for n, c in ast_[t]["lines_per_node"]))
w("")

# ------------------------------------------------------------------ 3
w("## 3. Imports inside a function or method body\n")
w("| | before | after |\n|---|---|---|")
cnt = {t: Counter(x["cat"] for x in ast_[t]["infn_imports"]) for t in T}
for cat, label in (("internal", "(a) internal (l2sched.*, relative)"),
                   ("optional", "(b) optional deps (torch, cutlass, cuda, vllm, triton, tvm_ffi, cupy, numpy)"),
                   ("other", "(c) other (stdlib / other third party)")):
    w(f"| {label} | {cnt['before'][cat]} | {cnt['after'][cat]} |")
w(f"| total | {sum(cnt['before'].values())} | {sum(cnt['after'].values())} |")


def own_node(x):
    parts = x["where"].split(":")[0].split("/")
    return parts[1][:-3] if parts[1].endswith(".py") and len(parts) == 2 else parts[1]


def tgt_node(x):
    m = re.match(r"(?:from|import)\s+l2sched\.(\w+)", x["text"])
    return m.group(1) if m else "?"


same_cross, commented = {}, {}
for t in T:
    ii = [x for x in ast_[t]["infn_imports"] if x["cat"] == "internal"]
    same = sum(1 for x in ii if tgt_node(x) == own_node(x))
    same_cross[t] = f"{same} / {len(ii) - same}"
    commented[t] = f"{sum(1 for x in ii if x['comment_same'] or x['comment_prev'])} of {len(ii)}"
w(f"| internal: target in the importer's own node / in another node | {same_cross['before']} | {same_cross['after']} |")
w(f"| internal with a comment on the same or the previous line | {commented['before']} | {commented['after']} |")
w("")
for t in T:
    byfile = Counter(x["where"].split(":")[0] for x in ast_[t]["infn_imports"] if x["cat"] == "internal")
    w(f"- {t}, internal in-function imports per file: " + ", ".join(f"{f.replace('l2sched/', '')} {c}"
                                                                     for f, c in sorted(byfile.items())))
w("")
w("After: every internal in-function import\n")
w("| file:line | import | comment (same line / previous line) | reason given |\n|---|---|---|---|")


def reason(c: str) -> str:
    c = c.lower()
    r = []
    if "cycle" in c or "circular" in c:
        r.append("cycle")
    if "vllm" in c or "torch" in c or "optional" in c:
        r.append("optional dependency (" + ", ".join(k for k in ("torch", "vllm") if k in c) + ")")
    if "starts faster" in c or "standard library" in c or "lazy" in c and not r:
        r.append("start-up / lazy load")
    return "; ".join(r) if r else ("comment, no reason" if c else "none")


for x in sorted((x for x in ast_["after"]["infn_imports"] if x["cat"] == "internal"),
                key=lambda x: (x["where"].split(":")[0], int(x["where"].split(":")[1]))):
    c = x["comment_same"] or x["comment_prev"]
    where = "same" if x["comment_same"] else ("previous" if x["comment_prev"] else "-")
    text = x["text"].split("#")[0].strip()
    w(f"| {x['where']} | `{text}` | {where}: `{c}` | {reason(c)} |" if c else
      f"| {x['where']} | `{text}` | - | none |")
w("\nNo internal in-function import in either tree names a cycle as its reason "
  "(and neither graph has a cycle, section 1).\n")

# ------------------------------------------------------------------ 4
w("## 4. CLI options (`l2sched` / `python -m l2sched`)\n")
cmds = list(cli["after"]["commands"])
w("| command | before: options (no help) | after: options (no help) |\n|---|---|---|")
for c in cmds:
    b = cli["before"]["commands"].get(c)
    a = cli["after"]["commands"][c]
    bt = f"{b['n_options']} ({b['n_no_help']})" if b else "-"
    w(f"| {c} | {bt} | {a['n_options']} ({a['n_no_help']}) |")
w(f"| **total** | **{cli['before']['total_options']} ({cli['before']['total_no_help']})** | "
  f"**{cli['after']['total_options']} ({cli['after']['total_no_help']})** |")
for t in T:
    flags = {tuple(o["strings"]) for c in cli[t]["commands"].values() for o in c["options"]}
    cli[t]["distinct"] = len(flags)
    cli[t]["distinct_strings"] = len({s for f in flags for s in f})
w(f"| distinct options across commands (alias groups / option strings) | {cli['before']['distinct']} / "
  f"{cli['before']['distinct_strings']} | {cli['after']['distinct']} / {cli['after']['distinct_strings']} |")
w(f"| --help text cross-check: options (no help) | {cli['before']['help_text_total_options']} "
  f"({cli['before']['help_text_total_no_help']}) | {cli['after']['help_text_total_options']} "
  f"({cli['after']['help_text_total_no_help']}) |")
w("")
w("Counts exclude `-h/--help`; the root's `--version` is included (1 in each tree). No option is "
  "`help=argparse.SUPPRESS` in either tree.\n")
for t in T:
    nh = [f"{c} `{', '.join(o['strings'])}`" for c, d in cli[t]["commands"].items() for o in d["options"]
          if not o["help"] and not o["hidden"]]
    w(f"- {t}, options without help ({len(nh)}): " + (", ".join(nh) if nh else "none"))
w("")


def opt_rows(t, pred):
    rows = []
    for c, d in cli[t]["commands"].items():
        for o in d["options"]:
            if pred(o):
                rows.append((c, ", ".join(o["strings"])))
    return rows


def is_output(o):
    return any(s == "-o" or re.match(r"--(md-)?out(put)?(-json)?$", s) for s in o["strings"])


def is_tokens(o):
    return any(s in ("--tokens", "--batch-size") for s in o["strings"])


w("Output-path option (options spelled -o / --out / --output / --output-json / --md-out / --md-output):\n")
w("| command | before | after |\n|---|---|---|")
ob = dict((c, []) for c in cmds)
for t in T:
    for c, s in opt_rows(t, is_output):
        ob.setdefault(c, [])
        ob[c].append((t, s))
for c in cmds:
    b = "; ".join(s for t, s in ob[c] if t == "before")
    a = "; ".join(s for t, s in ob[c] if t == "after")
    if b or a:
        w(f"| {c} | `{b or '-'}` | `{a or '-'}` |")
w("")
for t in T:
    rows = opt_rows(t, is_output)
    strings = sorted({x for c, s in rows for x in s.split(", ")})
    main = Counter()
    for c in cmds:
        grp = [s for cc, s in rows if cc == c and "md-" not in s]
        if grp:
            main[grp[0]] += 1
    w(f"- {t}: {len(strings)} distinct option strings in this family ({', '.join(f'`{x}`' for x in strings)}); "
      f"the main output option of the {sum(main.values())} commands that have one is spelled "
      + ", ".join(f"`{k}` in {v}" for k, v in main.most_common())
      + "; every command that takes `--output` also takes `-o`: "
      + str(all(("-o" in s.split(", ")) == ("--output" in s.split(", ")) for c, s in rows)))
w("")
w("Other options that name an output path but are outside that spelling family (same in both trees): "
  "`profile --state` (read and written), `bench run --trace-dir`, `docs --file`.\n")
w("Tokens-per-step option:\n")
w("| command | before | after |\n|---|---|---|")
tb = {c: {} for c in cmds}
for t in T:
    for c, s in opt_rows(t, is_tokens):
        tb[c][t] = s
for c in cmds:
    if tb[c]:
        w(f"| {c} | `{tb[c].get('before', '-')}` | `{tb[c].get('after', '-')}` |")
w("")

# ------------------------------------------------------------------ 5
w("## 5. Tracked bytes\n")


def parse_bytes(lines):
    d = {"files": int(lines[0].split(": ")[1]), "total": int(lines[2]), "text": [], "any": []}
    mode = None
    for l in lines[5:]:
        if l.startswith("binary tracked files"):
            d["binary"] = int(l.split(": ")[1])
            mode = "text"
            continue
        if l.startswith("largest tracked files of any kind"):
            mode = "any"
            continue
        if mode and re.match(r"^\d+ ", l):
            sz, name = l.split(" ", 1)
            d[mode].append((int(sz), name))
    return d


bd = {t: parse_bytes(byt[t]) for t in T}
w("| | before | after |\n|---|---|---|")
w(f"| tracked files | {bd['before']['files']} | {bd['after']['files']} |")
w(f"| tracked bytes (`git ls-files -z \\| xargs -0 du -cb`, total) | **{bd['before']['total']:,}** | "
  f"**{bd['after']['total']:,}** |")
w(f"| binary tracked files (git's numstat `-`) | {bd['before']['binary']} | {bd['after']['binary']} |")
for i in range(5):
    b, a = bd["before"]["text"][i], bd["after"]["text"][i]
    w(f"| text #{i + 1} | {b[1]} ({b[0]:,} B) | {a[1]} ({a[0]:,} B) |")
w("")
for t in T:
    w(f"- {t}, 5 largest of any kind: " + ", ".join(f"{n} ({s:,} B)" for s, n in bd[t]["any"]))
w("")

# ------------------------------------------------------------------ 6
w("## 6. Names a DeviceProfile object takes in l2sched/\n")


def flow_counts(lines):
    head = lines[0]
    m = re.match(r"# \S+: (\d+) distinct names, (\d+) binding sites", head)
    rows = []
    for l in lines[1:]:
        if l.startswith("  "):
            break
        n, c, kinds = l.split("\t")
        rows.append((n, int(c), kinds))
    return int(m.group(1)), int(m.group(2)), rows


fc = {t: flow_counts(flow[t]) for t in T}
sa = {t: ast_[t]["dp_name_counts"] for t in T}
w("| | before | after |\n|---|---|---|")
w(f"| (A) strict: annotated `DeviceProfile` or assigned from a loader call — distinct names | "
  f"**{len(sa['before'])}** | **{len(sa['after'])}** |")
w(f"| (A) names (binding sites) | " + ", ".join(f"`{n}` {c}" for n, c in sa["before"]) + " | "
  + ", ".join(f"`{n}` {c}" for n, c in sa["after"]) + " |")
w(f"| (C) value flow (A + calls, aliases, self attributes, dataclass fields, replace()) — distinct names | "
  f"**{fc['before'][0]}** ({fc['before'][1]} sites) | **{fc['after'][0]}** ({fc['after'][1]} sites) |")
w(f"| (C) names (binding sites) | " + ", ".join(f"`{n}` {c}" for n, c, _ in fc["before"][2]) + " | "
  + ", ".join(f"`{n}` {c}" for n, c, _ in fc["after"][2]) + " |")
w("| (C) + sites found only by the grep below (attribute reads on another object) | "
  "+ `dev` 1 (fit/caps.py:30), + `device` 1 (lint/rules/timing.py:198) → **12 names** | "
  "+ `device_profile` 2 (fit/caps.py:31, lint/rules/timing.py:212) → **6 names** |")
w(f"| (B) unannotated parameters a docstring calls a DeviceProfile | "
  + ", ".join(f"`{n}` {c}" for n, c in ast_["before"]["dp_doc_name_counts"]) + " | "
  + (", ".join(f"`{n}` {c}" for n, c in ast_["after"]["dp_doc_name_counts"]) or "none") + " |")
w("")
for t in T:
    w(f"- {t} (C), by kind: " + "; ".join(f"`{n}`: {k}" for n, c, k in fc[t][2]))
w("")

# ------------------------------------------------------------------ notes
w("## Method notes (how each number was computed; rerun with `bash /tmp/m47/run_all.sh`)\n")
w("""Trees: `git -C /work/main worktree add --detach /tmp/m47/before 2af54cc` and
`git -C /work/main worktree add --detach /tmp/m47/after main`; both worktrees were clean (`git status --short`
empty). Python: /work/main/.venv/bin/python. Nothing in /work/main was changed.

**1. Import graph** (`ast_metrics.py TREE`). Files: every `TREE/l2sched/**/*.py` (no `__pycache__`), parsed with
`ast.parse`. Node of a file = first path component below `l2sched/` (`l2sched/lint/x.py` → `l2sched.lint`); a file
directly in `l2sched/` is its own node (`l2sched.errors`, `l2sched.__init__`, `l2sched.__main__`, ...). All such
nodes are graph nodes, with or without edges. Every `ast.Import` / `ast.ImportFrom` anywhere in the tree (found by a
full walk) is mapped to target nodes: `import l2sched.X...` / `from l2sched.X... import ...` → node `l2sched.X`
(if `l2sched.X` is a node, else `l2sched.__init__`); `from l2sched import A, B` → `l2sched.A` for each name that is
a node, else `l2sched.__init__`; bare `import l2sched` → `l2sched.__init__`. Relative imports would be resolved
against the importing module but there are none in either tree. Self-edges (import within the same node) are dropped.
"All imports" = every import node; "top-level only" = import nodes not nested (at any depth) in a
`def`/`async def`/`lambda` and not in the body of `if TYPE_CHECKING:` (module-level `try`/`if` and class bodies
count as top level). A third variant (all imports minus TYPE_CHECKING) is in before.json/after.json
(`graph_no_type_checking`); it equals "all" in both trees. Graph: `networkx.DiGraph`; cycles =
`sum(1 for _ in nx.simple_cycles(g))`; floors = `len(nx.dag_longest_path(nx.condensation(g)))`, i.e. the number
of condensation nodes on a longest path (ties: networkx picks one; the length is unique). Imports made with
`importlib.import_module(...)` (e.g. `cli/main.py` loading `l2sched.cli.<name>`, `vllm/__init__.py`,
`model/adapters/__init__.py`) are not AST imports and are not counted. lint-imports was run as
`cd TREE && PYTHONPATH=$PWD /work/main/.venv/bin/lint-imports --no-cache` (output in lint_imports_TREE.txt). Cross-check: `grimp_check.py` builds
`grimp.build_graph('l2sched')` (all imports, any nesting), maps each module to its first-level node the same
way and compares the edge set with ast_metrics.py's 'all imports' edges.

**2. Lines** (`ast_metrics.py`). Physical lines = `len(text.splitlines())` per .py file, summed per node
(same as `find l2sched -name '*.py' | xargs cat | wc -l`: 29529 / 34279; all 156 / 180 .py files are tracked).
Share = node lines / all l2sched .py lines. A subpackage's count includes its nested packages
(e.g. `model` includes `model/adapters/*`). The secondary count drops blank lines and lines whose first
non-blank character is `#` (docstrings are counted).

**3. In-function imports** (`ast_metrics.py`). An import node counts when it is nested (any depth) in a
`def`/`async def`/`lambda` body and not in the body of an `if TYPE_CHECKING:` (there are no TYPE_CHECKING
blocks inside functions in either tree). Classification, first match: internal = `ImportFrom` with `level > 0`
or a module name `l2sched` / `l2sched.*` (for `Import`: any of its names); optional = the first dotted component
of the (first) imported module is one of torch, cutlass, cuda, vllm, triton, tvm_ffi, cupy, numpy; other =
everything else. Comments are read with `tokenize`; "same line" = a comment token on the import's first line,
"previous line" = the line before is a comment-only line. The reason column is a keyword reading of that
comment (cycle/circular → cycle; vllm/torch/optional → optional dependency; "starts faster"/"standard library"/
"Lazy" → start-up / lazy load); each comment is quoted verbatim so the reading can be checked. "Own node /
another node" compares the importer's node with `l2sched.<X>` of the import text.

**4. CLI options** (`cli_options.py`, run as `cd TREE && PYTHONPATH=$PWD /work/main/.venv/bin/python
/tmp/m47/cli_options.py`). (A) `l2sched.cli.main.build_parser(())` (which registers every subcommand, as
`l2sched --help` does) is walked through its `_SubParsersAction` choices: root, 12 subcommands (`timeline` is
registered by `cli/lint.py`), and `bench run`, `bench tp` (the only nested subparsers; `docs hooks|lint` is a
positional choice, not a subcommand). Per command, each action with non-empty `option_strings` counts once
(aliases together); `-h/--help` is excluded; "no help" = `action.help` is None or "". (B) cross-check:
`python -m l2sched [CMD [SUB]] --help` (COLUMNS=100) for the same 15 command paths, parsing the
options section: an entry is a line `  -...`; it has help when text follows after 2+ spaces or the next line is
an indented continuation. (A) and (B) agree in both trees (117/13 before, 119/0 after). Output-path spellings:
options with a string `-o` or matching `--(md-)?out(put)?(-json)?`; tokens-per-step: options with string
`--tokens` or `--batch-size` (`--ar-extra-tokens`, an all-reduce size list, is not a tokens-per-step option).
The lab's own CLI (`python -m lab ...`, where `bench`'s research commands moved) is not part of the
`l2sched` entry point and is not counted.

**5. Tracked bytes** (`tracked_bytes.sh TREE`). Total = sum of the `total` lines of
`git ls-files -z | xargs -0 du -cb` (equal to the sum of `stat -c %s` over the tracked files). Text vs binary:
git's own detection, `git diff --numstat 4b825dc642cb6eb9a060e54bf8d69288fbee4904 HEAD` (empty tree → HEAD)
prints `-` for binary files (all are `.json.gz` here); the 5 largest tracked files not in that list are the
"text" ones. Sizes are working-tree bytes (the worktrees equal HEAD).

**6. DeviceProfile names.** (A) strict, `ast_metrics.py`: loaders = `DeviceProfile(...)`, every function whose
return annotation mentions `DeviceProfile` (`tuple[DeviceProfile, X]` → that position), and to a fixpoint every
function that directly returns a full loader call (e.g. `recorded_profile`, `check_device_arg`). A binding site is:
a parameter annotated with a type mentioning `DeviceProfile`; an annotated class field (`x: DeviceProfile`);
an annotated local; a name or `self.attr` assigned from a loader call (also through `a or b` / `a if c else b`);
a name or attribute assigned from a name already known in that function (alias). (C) value flow,
`dp_names_flow.py`: (A)'s seeds plus, to a fixpoint over the whole package: a call inside l2sched passing a known
profile value (positional or keyword) marks the callee's parameter (callees resolved through same-module defs,
`from l2sched.x import f` incl. re-exports in `__init__`, `module.f`, `self.method`, `Class(...)` → `__init__`, or
for a class without `__init__` its annotated fields in order); `self.attr = <profile>` marks the class attribute
and reads of `self.attr` in that class; `dataclasses.replace(<profile>, ...)` is a profile; a function returning a
profile becomes a loader. Not followed: attribute reads on another object (`run.device`, `variants[0].device`),
loop variables, containers. Those reads were searched with
`grep -rnE '^\\s*\\w+\\s*=\\s*\\S+\\.(device_profile|device|profile)\\b' TREE/l2sched --include=*.py`, each hit
read by hand; the DeviceProfile ones are the extra row of the table (before: `dev = evaluator.variants[0].device`,
`device = run.device`; after: `device_profile = evaluator.variants[0].device_profile`,
`device_profile = run.device_profile`); other hits are torch devices/indices or schedule device names. (B):
unannotated parameters whose function docstring matches ``NAME`` (a ``DeviceProfile``) / ``NAME``: ``DeviceProfile``
/ ``NAME`` DeviceProfile; all 14 such sites in before are also found by (C). A name counts once per binding site
(one parameter of one def, one assignment statement, one class field/attribute). Full site lists:
dp_flow_before.txt, dp_flow_after.txt, and `dp_found` in before.json / after.json.
""")

(D / "metrics.md").write_text("\n".join(out) + "\n")
print("wrote", D / "metrics.md")
