"""``lab/experiments/graph_census.py`` on the CPU: the census of node
records, the driver path's error record without a GPU graph, and the
``CUDAGraph`` wrapper's wiring (which graphs are kept, the JSON it writes)
over a stand-in for torch's class (no CUDA graph exists on a CPU)."""

from __future__ import annotations

import json
import types

from lab.experiments import graph_census as gc


def test_summarize_counts_types_edges_kernels_and_attributes():
    nodes = [{"type": "KERNEL", "kernel": "sm90_gemm", "cluster": [2, 1, 1], "pss": True,
              "priority": 0},
             {"type": "MEMSET", "kernel": None},
             {"type": "KERNEL", "kernel": "sm90_gemm", "cluster": [1, 1, 1], "pss": False,
              "priority": None},
             {"type": "KERNEL", "kernel": None, "cluster": None, "pss": False, "priority": -1},
             {"type": "EVENT_RECORD", "kernel": None}]
    got = gc.summarize(nodes, ["DEFAULT", "PROGRAMMATIC", "DEFAULT"])
    assert got["nodes"] == 5 and got["edges"] == 3
    assert got["types"] == {"KERNEL": 3, "MEMSET": 1, "EVENT_RECORD": 1}
    assert got["edge_types"] == {"DEFAULT": 2, "PROGRAMMATIC": 1}
    assert got["kernels"] == {"sm90_gemm": 2, "?": 1}
    assert got["clustered_kernels"] == {"sm90_gemm": 1}
    assert got["programmatic_kernels"] == {"sm90_gemm": 1}
    assert got["priorities"] == [-1, 0]


def test_census_of_no_graph_is_an_error_record_not_a_raise():
    got = gc.census(0)
    assert set(got) == {"error"} and got["error"]


class _Graph:
    """Stand-in for ``torch.cuda.CUDAGraph``: ``__new__(keep_graph)``,
    ``capture_end``, ``raw_cuda_graph``, ``instantiate``. Like torch's, it
    keeps ``keep_graph`` out of reach of Python and takes it where pybind
    builds the C++ graph, in ``__init__`` (a wrapper that read ``_keep_graph``
    back, or passed it to ``__new__`` only, censused nothing on the GPU)."""

    seen_keep: list[bool] = []

    def __new__(cls, keep_graph=False):  # torch's passes it on; pybind ignores it there
        g = super().__new__(cls)
        g.ended, g.instantiated = False, False
        return g

    def __init__(self, keep_graph=False):  # where pybind builds the C++ graph
        _Graph.seen_keep.append(keep_graph)

    def capture_end(self):
        self.ended = True

    def raw_cuda_graph(self):
        return 0

    def instantiate(self):
        self.instantiated = True


def test_keep_census_keeps_the_first_graphs_and_writes_their_census(tmp_path):
    fake = types.SimpleNamespace(cuda=types.SimpleNamespace(CUDAGraph=_Graph))
    gc.keep_census(fake, str(tmp_path), "real", 2)
    _Graph.seen_keep.clear()
    graphs = [fake.cuda.CUDAGraph() for _ in range(3)]
    assert _Graph.seen_keep == [True, True, False]
    for g in graphs:
        g.capture_end()
    assert all(g.ended for g in graphs)
    assert [g.instantiated for g in graphs] == [True, True, False]
    out = json.loads((tmp_path / "census-real.json").read_text(encoding="utf-8"))
    assert len(out) == 2 and all("error" in c for c in out)  # no driver graph on a CPU


def test_compare_two_files_on_the_cpu(tmp_path, capsys):
    a = gc.summarize([{"type": "KERNEL", "kernel": "gemm", "cluster": [2, 1, 1], "pss": False,
                       "priority": None}, {"type": "MEMSET", "kernel": None}], ["DEFAULT"])
    b = gc.summarize([{"type": "KERNEL", "kernel": "read", "cluster": None, "pss": False,
                       "priority": None}], [])
    (tmp_path / "census-real.json").write_text(json.dumps([a]), encoding="utf-8")
    (tmp_path / "census-stream.json").write_text(json.dumps([b, {"error": "x"}]),
                                                 encoding="utf-8")
    out = tmp_path / "cmp.json"
    assert gc.main([str(tmp_path / "census-real.json"), str(tmp_path / "census-stream.json"),
                    "-o", str(out)]) == 0
    text = capsys.readouterr().out
    assert "| type MEMSET | 1 | 0 |" in text and "| clustered kernels | 1 | 0 |" in text
    assert "| `gemm` | 1 | 0 |" in text and "| `read` | 0 | 1 |" in text
    assert json.loads(out.read_text(encoding="utf-8"))["index"] == 0
    lines = gc.compare(a, {"error": "cuGraphGetNodes: 1"}, ("r", "s"))
    assert lines[-1] == "| error (s) | cuGraphGetNodes: 1 | |"


def test_programmatic_edges_are_counted_by_the_kinds_of_their_ends():
    records = [{"type": "KERNEL", "kernel": "splitK"}, {"type": "KERNEL", "kernel": "gemm"},
               {"type": "MEMSET", "kernel": None}]
    edges = ([11, 12, 11], [12, 13, 13], None)
    got = gc._programmatic_pairs([11, 12, 13], records, edges,
                                 ["PROGRAMMATIC", "DEFAULT", "PROGRAMMATIC"])
    assert got == {"splitK -> gemm": 1, "splitK -> MEMSET": 1}
    bad = gc._programmatic_pairs([11], records, edges, ["PROGRAMMATIC"] * 3)
    assert set(bad) == {"error"}  # an edge from a node it does not know
