"""Adding a model family is one folder: no product file outside
``l2sched/model/adapters/<family>/`` names what only some families have.

The vocabulary is read from the shipped adapters themselves (never typed
here): op names, tensor paths, config keys, layer-kind names, hook and
selector names, architectures, model types, adapter and config names,
the globs of the buffers the model writes (``WRITTEN_BUFFERS``). A
name is *family-specific* when not every shipped adapter has it
(``moe.w13`` is everyone's; ``kda.recurrent`` and ``n_routed_experts`` are
not). Names that are one lowercase word (``dense``, ``hash``, ``kda``) are
left out: they are English words or too short to tell from prose.

Every ``l2sched/**/*.py`` outside the adapter folders is parsed and its
code is searched: string literals (not docstrings) and identifiers. Left
out, each for the reason given in ``EXEMPT``: the registry's table, the
lint rules' documentation text (examples quoted from the shipped GLM
schedules, rendered into docs/lint.md), and the bench (``l2sched/bench``:
its decode step is GLM-5.3-shaped by design and refuses another model).
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

from l2sched.model.adapters import ARCHITECTURE_TABLE, get_adapter
from l2sched.model.adapters.protocol import optional_member

ROOT = Path(__file__).resolve().parent.parent
PRODUCT = ROOT / "l2sched"
ADAPTERS = PRODUCT / "model" / "adapters"

#: Product files (or folders, ending in ``/``) allowed to name
#: family-specific things, with why.
EXEMPT = {
    "l2sched/bench/": "the bench: a GLM-5.3-shaped decode step by design "
                      "(bench/run.py refuses a config of another model)",
    "l2sched/profile/step_fill.py": "times fills on the bench's GLM-5.3-shaped "
                                    "step, with a schedule written for it",
}
#: In the registry, only these assignments may name families: the
#: architecture table (one line per family) and the default adapter.
REGISTRY = "l2sched/model/adapters/__init__.py"
REGISTRY_NAMES = ("ARCHITECTURE_TABLE", "DEFAULT_ADAPTER")
#: ``Rule(...)`` keywords that hold the rule's documentation (docs/lint.md).
RULE_DOC_FIELDS = ("what", "why", "example", "fix", "example_command")
#: Keys of every Hugging Face text config, whichever adapters list them.
GENERIC_KEYS = {"vocab_size"}

TOKEN = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+\-]*[A-Za-z0-9_]")


def _vocabulary(adapter) -> set[str]:
    """The names ``adapter`` defines (see the module docstring), over the
    layer kinds of its embedded config and its ``ALL_KINDS`` where it lists
    them (Qwen3-30B-A3B has no dense layer)."""
    cfg = json.loads(adapter.default_config_text())
    kinds = set(adapter.layer_kinds(cfg)) | set(getattr(adapter, "ALL_KINDS", ()))
    names = set(adapter.REQUIRED_KEYS) | set(adapter.OPTIONAL_KEYS)
    names |= set(adapter.CONFIG_BOUNDS) | set(adapter.SELECTORS)
    names |= {h.name for h in adapter.HOOKS}
    names |= set(adapter.ARCHITECTURES) | set(adapter.MODEL_TYPES)
    names |= {adapter.NAME, adapter.DEFAULT_CONFIG, adapter.DEFAULT_MODEL_NAME}
    names |= set(optional_member(adapter, "WRITTEN_BUFFERS"))
    for kind in kinds:
        names.add(str(kind))
        for op in adapter.decode_timeline(kind):
            names.add(op.name)
            names |= set(op.reads)
        names |= {s.path for s in adapter.layer_specs(cfg, kind, 1, False, 0)}
    return names


def family_specific() -> dict[str, list[str]]:
    """Family-specific name -> the adapters that have it."""
    vocab = {name: _vocabulary(get_adapter(name)) for name in ARCHITECTURE_TABLE}
    shared = set.intersection(*vocab.values())
    return {w: sorted(n for n in vocab if w in vocab[n])
            for w in set.union(*vocab.values()) - shared - GENERIC_KEYS
            if not re.fullmatch(r"[a-z]+", w)}


def _skipped_constants(tree: ast.AST, rel: str) -> set[int]:
    """ids of the string constants not searched: docstrings, the rule
    documentation fields, the registry's table."""
    skip: set[int] = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef,
                             ast.AsyncFunctionDef)) and body \
                and isinstance(body[0], ast.Expr) \
                and isinstance(body[0].value, ast.Constant):
            skip.add(id(body[0].value))
        if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "Rule":
            for kw in node.keywords:
                if kw.arg in RULE_DOC_FIELDS:
                    skip |= {id(n) for n in ast.walk(kw.value)}
        if rel == REGISTRY and isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(getattr(t, "id", "") in REGISTRY_NAMES for t in targets):
                skip |= {id(n) for n in ast.walk(node)}
    return skip


def names_in(source: str, rel: str, vocabulary) -> set[str]:
    """The names of ``vocabulary`` that the code of ``source`` (the text of
    the product file ``rel``) uses in a string literal or an identifier."""
    tree = ast.parse(source)
    skip = _skipped_constants(tree, rel)
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) \
                and id(node) not in skip:
            words = set(TOKEN.findall(node.value)) | {node.value}
        elif isinstance(node, ast.Name):
            words = {node.id}
        elif isinstance(node, ast.Attribute):
            words = {node.attr}
        else:
            continue
        found |= words & vocabulary
    return found


def _product_files():
    families = {ADAPTERS / name for name in ARCHITECTURE_TABLE}
    for path in sorted(PRODUCT.rglob("*.py")):
        if not any(f in path.parents for f in families):
            yield path, path.relative_to(ROOT).as_posix()


def test_the_vocabulary_is_the_adapters():
    """Not vacuous: the vocabulary holds what the adapters really differ in,
    and leaves out what they share."""
    vocab = family_specific()
    assert vocab["kda.recurrent"] == ["glm5next"]
    assert vocab["n_routed_experts"] == ["deepseek_v4", "glm5next"]
    assert vocab["mlp.gate_up_proj"] == ["glm5next", "qwen3_moe"]
    assert vocab["Qwen3MoeForCausalLM"] == ["qwen3_moe"]
    assert vocab["*conv_state*"] == ["glm5next"]
    assert "moe.w13" not in vocab and "num_experts_per_tok" not in vocab
    assert len(vocab) > 200


def test_the_search_finds_a_name_where_code_uses_it():
    """Not vacuous: a literal, an identifier and a help string are found;
    a docstring, a rule's documentation and the registry table are not."""
    vocab = set(family_specific())
    code = ('"""Docstring: kda.recurrent."""\n'
            'X = ("moe.w13", "kda.recurrent")\n'
            'def f(cfg):\n    return cfg.n_routed_experts\n'
            'HELP = "default: the embedded GLM-5.3-Flash config"\n'
            'R = Rule("L2S0", "x", "error", example="`this mlp.gate_up_proj`")\n')
    assert names_in(code, "l2sched/x.py", vocab) == {
        "kda.recurrent", "n_routed_experts", "GLM-5.3-Flash"}
    table = 'ARCHITECTURE_TABLE = {"qwen3_moe": ("Qwen3MoeForCausalLM",)}\n'
    assert names_in(table, REGISTRY, vocab) == set()
    assert names_in(table, "l2sched/x.py", vocab) == {
        "qwen3_moe", "Qwen3MoeForCausalLM"}


def test_no_product_file_outside_the_adapters_names_a_family():
    vocab = set(family_specific())
    bad, exempt_used, scanned = {}, set(), 0
    for path, rel in _product_files():
        scanned += 1
        found = names_in(path.read_text("utf-8"), rel, vocab)
        exempt = next((e for e in EXEMPT if rel.startswith(e)), None)
        if exempt is not None:
            exempt_used |= {exempt} if found else set()
        elif found:
            bad[rel] = sorted(found)
    assert scanned > 100
    assert bad == {}, ("family-specific names in product files outside "
                       "l2sched/model/adapters/<family>/ (move them into the "
                       f"adapter, behind the protocol): {bad}")
    assert exempt_used == set(EXEMPT), "an EXEMPT entry no longer names a family"


def test_written_buffers_are_vllms_and_the_adapters():
    """L2S003's globs: vLLM's (every model) and the adapter's own; Qwen3-MoE
    has none of its own, so GLM's KDA states mean nothing there."""
    from l2sched.lint.rules.targets import _written_buffer, written_buffers

    glm, qwen, dsv4 = (written_buffers(get_adapter(n))
                       for n in ("glm5next", "qwen3_moe", "deepseek_v4"))
    assert "KDA conv state" in _written_buffer(glm, "self_attn.conv_state")
    assert _written_buffer(qwen, "self_attn.conv_state") == ""
    assert "KV cache" in _written_buffer(qwen, "self_attn.attn.kv_cache")
    assert "indexer key cache" in _written_buffer(dsv4, "attn.indexer.k_cache")
    assert "rotary" in _written_buffer(dsv4, "attn.rotary_emb.cos_sin_cache")
