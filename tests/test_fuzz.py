"""Property and fuzz tests of the .l2s front end (parser, formatter, checker).

Two families, all deterministic (``derandomize=True``):

- Hypothesis strategies over the grammar generate valid schedule texts
  (settings, windows with clauses in any order, selectors, targets, ``set``
  lines, comments and whitespace between any two tokens) and assert
  ``parse(format_text(x)) == parse(x)``, that ``fmt`` is idempotent and keeps
  every comment, and that checking the text raises nothing but ``L2sError``.
- Random mutations (character and token deletes, inserts, replacements,
  duplications, swaps, byte flips, truncation) of the shipped schedules assert
  that nothing but an ``L2sError`` escapes ``parse``, ``load_schedule_text``
  and ``load_schedule`` (through a file, so the input checks run too).

About 11,000 cases in all; the budget is about a minute on a 2-core machine.
"""

from __future__ import annotations

import random
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from l2sched.errors import L2sError
from l2sched.lang.formatter import format_file, format_text
from l2sched.lang.resolve import load_schedule, load_schedule_text
from l2sched.lang.syntax import parse

SCHEDULES = Path(__file__).resolve().parent.parent / "schedules"
SHIPPED = {p.name: p.read_text("utf-8") for p in sorted(SCHEDULES.glob("*.l2s"))}

#: Health checks that only say the generated texts are large or slow to make.
SLOW_OK = [HealthCheck.too_slow, HealthCheck.data_too_large,
           HealthCheck.large_base_example, HealthCheck.function_scoped_fixture]

KEYWORDS = {"schedule", "extends", "window", "set", "at", "budget", "layers",
            "carry", "this", "next", "lazy", "except", "model", "device", "tp",
            "ep", "max_tokens", "policy", "set_aside"}
SETTING_KEYS = ["model", "device", "tp", "ep", "max_tokens", "policy", "set_aside"]
HOOKS = ["layer.entry", "attn.after_first_proj", "attn.before_core",
         "attn.after_core", "attn.pre_all_reduce", "attn.post_all_reduce",
         "moe.after_gate", "moe.before_experts", "moe.pre_all_reduce",
         "moe.post_all_reduce", "mlp.pre_all_reduce", "mlp.post_all_reduce",
         "layer.exit"]
UNITS = ["B", "KB", "MB", "GB", "KiB", "MiB", "GiB", "Mb", "XB", "kb"]

# -------------------------------------------------------------------------
# a generator over the grammar
#
# Hypothesis draws the statement sequence (which kinds, in which order) and
# one seed; the seed fills in every leaf (names, numbers, units, selectors,
# targets, clause order, whitespace and comments) through ``random.Random``.
# Drawing every leaf through Hypothesis cost ~150 draws and ~25 ms a case;
# this keeps thousands of cases inside the CI budget, and shrinking still
# removes statements and lowers the seed.

_LETTERS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_"
_PATH_PARTS = ["*", "hc_ffn_*", "W_UK_T", "a?", "[ab]", "mla_attn", "o_proj",
               "self_attn", "mlp", "gate"]
_COMMENT_CHARS = " aZ09#{}=.,-\"'é"
_SPACES = [" ", "  ", "\t", "\n", "\n\n", " \n  ", "\r\n", "\f "]
_NUMBERS = ["0.5", "7.5", "20.25", "007", "1.0"]


class _Gen:
    """Random tokens of each grammar rule (lists of strings)."""

    def __init__(self, seed: int):
        self.r = random.Random(seed)

    def ident(self) -> str:
        r = self.r
        while True:
            s = r.choice(_LETTERS) + "".join(
                r.choice(_LETTERS + "0123456789") for _ in range(r.randrange(7)))
            if s not in KEYWORDS:
                return s

    def dotted(self) -> str:
        r = self.r
        return ".".join(r.choice(_PATH_PARTS) if r.random() < 0.5 else self.ident()
                        for _ in range(r.randint(1, 4)))

    def number(self) -> str:
        return str(self.r.randrange(61)) if self.r.random() < 0.8 else \
            self.r.choice(_NUMBERS)

    def size(self) -> str:
        return self.number() + self.r.choice(UNITS)

    def string(self) -> str:
        return '"' + "".join(self.r.choice("abcXYZ019 ._/-")
                             for _ in range(self.r.randrange(13))) + '"'

    def atom(self, depth: int) -> list[str]:
        r = self.r
        kind = r.choice(["name", "index", "range"] + (["group"] if depth < 1 else []))
        if kind == "name":
            return [r.choice(["all", "kda", "mla", "dense", "moe", "kdaa", "every"])]
        if kind == "index":
            return [self.number()]
        if kind == "range":
            return [self.number(), "..", self.number()]
        return ["(", *self.selector(depth + 1), ")"]

    @staticmethod
    def join(parts: list[list[str]], sep: str) -> list[str]:
        out: list[str] = []
        for i, p in enumerate(parts):
            out += ([sep] if i else []) + p
        return out

    def union(self, depth: int) -> list[str]:
        r = self.r
        return self.join([self.join([self.atom(depth) for _ in range(r.randint(1, 2))],
                                    "&") for _ in range(r.randint(1, 3))], ",")

    def selector(self, depth: int = 0) -> list[str]:
        """``union [except union]`` over names, indices, ranges and groups."""
        tokens = self.union(depth)
        if self.r.random() < 0.4:
            tokens += ["except"] + self.union(depth)
        return tokens

    def patterns(self) -> list[str]:
        return self.join([[self.dotted()] for _ in range(self.r.randint(1, 3))], ",")

    def target(self) -> list[str]:
        """``this|next [lazy] PATTERN, ... [except PATTERN, ...]``."""
        r = self.r
        tokens = [r.choice(["this", "next"])] + (["lazy"] if r.random() < 0.3 else [])
        tokens += self.patterns()
        if r.random() < 0.3:
            tokens += ["except"] + self.patterns()
        return tokens

    def window(self) -> list[str]:
        """``window NAME`` + clauses in random order (some repeated) + body."""
        r = self.r
        clauses = {
            "at": lambda: ["at", r.choice(HOOKS) if r.random() < 0.7 else self.dotted()],
            "budget": lambda: ["budget", self.size() if r.random() < 0.8
                               else self.number()],
            "layers": lambda: ["layers", *self.selector()],
            "carry": lambda: ["carry", r.choice(["A", "B", "C"]) if r.random() < 0.7
                              else self.ident()],
        }
        tokens = ["window", r.choice(["A", "B", "C", "A_MLA"]) if r.random() < 0.7
                  else self.ident()]
        for _ in range(r.randrange(5)):
            tokens += clauses[r.choice(list(clauses))]()
        if r.random() < 0.6:
            tokens.append("{")
            for _ in range(r.randrange(4)):
                tokens += self.target()
            tokens.append("}")
        return tokens

    def setting(self) -> list[str]:
        r = self.r
        value = r.choice([self.size, self.number, self.ident, self.string,
                          lambda: r.choice(["glm5next", "h200", "on", "max"])])()
        return [r.choice(SETTING_KEYS), value]

    def override(self) -> list[str]:
        r = self.r
        key = r.choice([lambda: r.choice(SETTING_KEYS), self.ident,
                        lambda: f"window.{r.choice('ABZ')}.{r.choice(_CLAUSES)}"])()
        value = "".join(r.choice("abkdmoeAB019_.&,()* ")
                        for _ in range(r.randint(1, 16))).strip() or "x"
        # the value runs to the end of the line: "\n" forces the line end
        return ["set", key, "=", "\x00VALUE" + value, "\n"]

    def comment(self) -> str:
        return "#" + "".join(self.r.choice(_COMMENT_CHARS)
                             for _ in range(self.r.randrange(16)))

    def layout(self, tokens: list[str]) -> str:
        """Join ``tokens`` with random whitespace and comments."""
        r = self.r
        out = [r.choice(["", self.comment() + "\n"])]
        for i, tok in enumerate(tokens):
            if tok == "\n":  # after a set value: a newline, maybe a comment first
                out.append(r.choice(["\n", " \n", "\t\n", " " + self.comment() + "\n"]))
                continue
            if tok.startswith("\x00VALUE"):  # stays on the line of its '='
                out.append(r.choice([" ", "", "\t"]) + tok[6:])
                continue
            if i:
                out.append(" " + self.comment() + "\n" if r.randrange(6) == 0
                           else r.choice(_SPACES))
            out.append(tok)
        out.append(r.choice(["", "\n", " # end\n"]))
        return "".join(out)


_CLAUSES = ["budget", "at", "layers", "carry"]


def _schedule_text(kinds: list[str], seed: int) -> str:
    g = _Gen(seed)
    r = g.r
    tokens = ["schedule", r.choice([g.ident, g.string,
                                    lambda: r.choice(['"window"', '"a b"'])])()]
    if r.random() < 0.3:
        tokens += ["extends", r.choice(['"glm53-flash-sm120-tp4.l2s"',
                                        '"missing.l2s"', '"x"'])]
    for kind in kinds:
        tokens += getattr(g, kind)()
    return g.layout(tokens)


#: Valid .l2s texts: the statement kinds from Hypothesis, the rest from a seed.
schedule_texts = st.builds(
    _schedule_text,
    st.lists(st.sampled_from(["setting", "window", "override"]), max_size=6),
    st.integers(0, 2**32 - 1))


def _comment_texts(tree) -> list[str]:
    return [c.text for c in tree.comments]


# -------------------------------------------------------------------------
# round trip


@settings(max_examples=2600, deadline=None, derandomize=True, database=None,
          suppress_health_check=SLOW_OK)
@given(schedule_texts)
@example("schedule s\nwindow A at x budget 1MB {\n  # c1\n  # c2\n  this a\n}\n")
@example("schedule s\nset tp = 4 # c\nwindow at at at budget 1MB layers (kda, 3..4) "
         "& moe except 5 {\n  this except, lazy except except\n  next lazy lazy\n}\n")
@example("schedule s\ntp\x0c4\n")
@example("schedule #\n\"\" #\nset #\nmodel #\n= 0 #\n")  # comments in a statement
@example("schedule s\nwindow A layers (kda except 3), 4, (5, 6) except (7)\n")
@example("schedule s\nwindow A layers ((moe)) except (3, (4))\n")  # issue 43
@example("schedule s\nwindow A  # h\n at x # a\n  # own\n budget 1MB # b\n { # c\n this a # t\n}\n")
@example('schedule "a#b"  # s\n')
def test_format_round_trip(text):
    """fmt keeps the meaning, is idempotent and keeps every comment."""
    tree = parse(text)
    out = format_file(tree)
    # format_text keeps the dominant line ending and a byte-order mark
    text_out = format_text(text)
    assert text_out.removeprefix("\ufeff").replace("\r\n", "\n") == out
    assert format_text(text_out) == text_out
    again = parse(out)
    assert again == tree
    assert format_file(again) == out
    assert sorted(_comment_texts(again)) == sorted(_comment_texts(tree))
    try:  # the checker may reject it, but only with an L2sError
        load_schedule_text(text)
    except L2sError:
        pass


# -------------------------------------------------------------------------
# mutations of the shipped files

_TOKEN_RE = re.compile(r"\s+|#[^\n]*|\"[^\"\n]*\"|[0-9]+(?:\.[0-9]+)?[A-Za-z]*|"
                       r"[A-Za-z_*?\[][A-Za-z0-9_.*?\[\]!\-]*|\.\.|.", re.S)
VOCAB = ["schedule", "extends", "window", "set", "at", "budget", "layers", "carry",
         "this", "next", "lazy", "except", "model", "device", "tp", "ep",
         "max_tokens", "policy", "set_aside", "{", "}", "(", ")", ",", "&", "=",
         "..", "#", '"', "\n", " ", "20MB", "20", "MB", "7.5MiB", "1.5B", "0",
         "99", "3..44", "kda", "mla", "moe", "dense", "all", "max", "none",
         "window.B.budget", "window.Z.at", "A", "B", "C", "glm5next", "h200",
         "attn.pre_all_reduce", "self_attn.*", "[", "]", "!", "\\", "\t", "\r",
         "\x0c", "\u2028", "\x00", "é", "\ufeff", "🙂", "1" * 30 + "GB",
         "((((((((((", "))))))))))"]
_char = st.one_of(st.sampled_from(list('{}()=,&.#"\n \t[]*?!-_0123456789aZ')),
                  st.characters())


@st.composite
def mutated(draw) -> str:
    """A shipped file after 1-4 random character or token edits."""
    text = draw(st.sampled_from(sorted(SHIPPED.values())))
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["del", "ins", "rep", "dup", "tdel", "tins",
                                   "tdup", "tswap", "trunc"]))
        if op in ("del", "ins", "rep", "dup", "trunc"):
            i = draw(st.integers(0, len(text)))
            j = min(len(text), i + draw(st.integers(0, 12)))
            if op == "del":
                text = text[:i] + text[j:]
            elif op == "ins":
                text = text[:i] + draw(st.text(_char, min_size=1, max_size=4)) + text[i:]
            elif op == "rep":
                text = text[:i] + draw(st.text(_char, min_size=1, max_size=3)) + text[j:]
            elif op == "dup":
                text = text[:j] + text[i:j] + text[j:]
            else:
                text = text[:i]
            continue
        toks = _TOKEN_RE.findall(text)
        if not toks:
            continue
        k = draw(st.integers(0, len(toks) - 1))
        if op == "tdel":
            del toks[k]
        elif op == "tins":
            toks.insert(k, draw(st.sampled_from(VOCAB)))
        elif op == "tdup":
            toks.insert(k, toks[k])
        else:
            m = draw(st.integers(0, len(toks) - 1))
            toks[k], toks[m] = toks[m], toks[k]
        text = "".join(toks)
    return text


@settings(max_examples=4500, deadline=None, derandomize=True, database=None,
          suppress_health_check=SLOW_OK)
@given(mutated())
@example("schedule s\nset tp =\nwindow C at x budget 1MB\n")
@example('schedule s\nextends "\x00glm53-flash-sm120-tp4.l2s"\n')  # was ValueError
@example("schedule s\nmodel glm5next\ndevice h200\ntp 4\nwindow A at layer.entry "
         "budget 1MB layers " + "(" * 300 + "kda" + ")" * 300 + "\n")
def test_mutated_text_raises_only_l2s_errors(text):
    """``parse``, ``format_text`` and ``load_schedule_text`` on a mutated
    shipped file: a result or an ``L2sError``, nothing else."""
    for call in (format_text, load_schedule_text):  # both parse first
        try:
            call(text)
        except L2sError as e:
            assert str(e)  # renders


@pytest.fixture(scope="module")
def fuzz_dir(tmp_path_factory):
    """One directory for every mutated file (extends falls back to the
    shipped schedules from there)."""
    return tmp_path_factory.mktemp("fuzz")


@st.composite
def mutated_bytes(draw) -> bytes:
    """A mutated shipped file as bytes, maybe with bits flipped (so some are
    not UTF-8) or cut in the middle of a multi-byte character."""
    # Newer hypothesis releases draw lone surrogates from st.characters():
    # encode them as the invalid UTF-8 they would be in a file.
    data = draw(mutated()).encode("utf-8", "surrogatepass")
    for _ in range(draw(st.integers(0, 3))):
        if not data:
            break
        i = draw(st.integers(0, len(data) - 1))
        data = data[:i] + bytes([data[i] ^ (1 << draw(st.integers(0, 7)))]) + data[i + 1:]
    if draw(st.integers(0, 9)) == 0:
        data = data[:draw(st.integers(0, len(data)))]
    return data


@settings(max_examples=3200, deadline=None, derandomize=True, database=None,
          suppress_health_check=SLOW_OK)
@given(data=mutated_bytes(), overrides=st.lists(
    st.one_of(st.sampled_from(["window.B.budget=25MB", "tp=2", "policy=evict_first",
                               "window.C.carry=none", "window.A.layers=kda & moe",
                               "=", "x", "window.B.at=layer.exit"]),
              st.text(st.sampled_from("window.ABZbudgetlayers=&, 0123MB#\n"),
                      max_size=20)), max_size=2))
@example(data=b"\xff\xfeschedule s\n", overrides=[])
@example(data=b"", overrides=[])
@example(data=b"schedule s\nmodel glm5next\xc3", overrides=[])
def test_mutated_file_raises_only_l2s_errors(fuzz_dir, data, overrides):
    """``load_schedule`` on mutated bytes with random ``--set`` overrides:
    a ``Schedule`` or an ``L2sError``, nothing else."""
    path = fuzz_dir / "mutant.l2s"
    path.write_bytes(data)
    try:
        load_schedule(path, overrides)
    except L2sError as e:
        assert str(e)
