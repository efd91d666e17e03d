"""The lower half of a run page: where the time went, the errors, and the provenance."""

from __future__ import annotations

import json
import re
from html import escape
from pathlib import Path
from typing import Any

from fasteval.render.html import page, svg
from fasteval.render.words import EVAL_S_MEANING, rate_text
from fasteval.render.html.run_input import MAX_ERROR_ROWS, MAX_TRACEBACKS, RunPageInput, final_errors, overall
from fasteval.types.eval_result import RESUMED_GLOBAL_RNG


STAGES_CAPTION = ("env_step: the envs' steps and resets; h2d, d2h: copies to and from the policy's device; policy: "
                  "the forward pass; bookkeeping: the metrics kernel, refills and callbacks; render: the recorders "
                  "(--videos: the frames env.render() draws, handed to the encoder; episode data); encode: the wait "
                  "for the videos' background encoder after the last episode.")


def time_section(inp: RunPageInput) -> str:
    timings = {k: float(v) for k, v in (inp.doc.get("timings") or {}).items() if isinstance(v, (int, float))}
    o = overall(inp.doc)
    meta = inp.doc.get("meta") or {}
    facts = [("engine time", f"{page.fmt(o.get('eval_s'), 3)} s"),
             ("set-up (not in engine time)", f"{page.fmt(meta.get('setup_s'), 3)} s" if meta.get("setup_s") else None),
             ("episodes/s", rate_text(o.get("episodes_per_s"), grouping=True)),
             ("env steps/s", rate_text(o.get("steps_per_s"), grouping=True)), ("env steps", page.fmt(o.get("env_steps"))),
             ("dry run", f"{page.fmt(meta.get('dry_run_s'), 4)} s" if meta.get("dry_run_s") is not None else None),
             ("batch", meta.get("batch_size")), ("vectorization", meta.get("vectorization")),
             ("batching", meta.get("batching")), ("kernel backend", meta.get("kernel_backend")),
             ("CUDA graph", meta.get("policy_cuda_graph"))]
    out = [page.kv([f for f in facts if f[1] is not None]), page.note(EVAL_S_MEANING)]
    if timings:
        total = float(o.get("eval_s") or sum(timings.values()) or 1.0)
        n = o.get("n_episodes") or 0
        rows = [({"stage": k}, [page.text(k), page.num(v, 4), page.num(100.0 * v / total),
                                page.num(1000.0 * v / n, 3) if n else page.none("—")]) for k, v in timings.items()]
        out.append(page.table("stages", ["stage", "seconds", "% of engine time", "ms per episode"], rows,
                              caption=STAGES_CAPTION))
        out.append(svg.bars(list(timings.items()), "seconds", "time per stage"))
    return "".join(out)


def errors_section(inp: RunPageInput) -> str:
    doc = inp.doc
    errors = list(doc.get("errors") or [])
    if not errors:
        return page.note("No env or policy error: every episode ran to its end on its first attempt.")
    final = final_errors(doc)
    retried = len(errors) - len(final)
    jobs = sum(1 for e in final if e.get("kind") == "job")
    if jobs:
        out = [page.note(f"{jobs} sweep jobs failed as a whole (their seed blocks have no episodes stored).")]
    else:
        out = [page.note(f"{len(final)} episodes failed for good (they are in no average); {retried} errors were retried "
                         "and their episodes then finished (or failed later). Every record is in errors.jsonl.")]
    if final:
        rows = []
        for e in final[:MAX_ERROR_ROWS]:
            task = f"{e.get('task_group')}/{e.get('task_id')}" if e.get("task_group") is not None else ""
            rows.append(({"episode": e.get("episode_ix"), "seed": e.get("seed")},
                         [page.num(e.get("episode_ix")), page.num(e.get("seed")), page.text(task), page.text(e.get("stage")),
                          page.num(e.get("step")), page.num(e.get("attempt")), page.text(_first_line(e.get("error")))]))
        out.append(page.table("errors", ["episode", "seed", "task", "stage", "step", "attempt", "cause"], rows))
        if len(final) > MAX_ERROR_ROWS:
            out.append(page.note(f"... and {len(final) - MAX_ERROR_ROWS} more failed episodes (all in errors.jsonl)."))
        traces = [e for e in final if e.get("traceback")][:MAX_TRACEBACKS]
        for e in traces:
            out.append(f"<details><summary>traceback of episode {escape(str(e.get('episode_ix')))} (seed "
                       f"{escape(str(e.get('seed')))})</summary><pre>{escape(str(e['traceback']))}</pre></details>")
    return "".join(out)


def _first_line(text: Any) -> str:
    text = str(text or "").strip()
    line = text.splitlines()[0] if text else "(no message)"
    return line if len(line) <= 300 else line[:297] + "..."


def _seeds_text(manifest: dict[str, Any], meta: dict[str, Any]) -> str | None:
    if isinstance(meta.get("seeds"), str):  # a sweep cell: its seed blocks
        return meta["seeds"]
    seed, n = manifest.get("seed", meta.get("seed")), manifest.get("n_episodes", meta.get("n_episodes"))
    per_task = manifest.get("n_episodes_per_task")
    if isinstance(seed, int) and isinstance(per_task, int):
        return f"{seed} .. {seed + per_task - 1} in every task (episode i uses seed {seed} + i)"
    if isinstance(seed, int) and isinstance(n, int) and meta.get("seeding", "per episode") != "per episode":
        return (f"seed {seed}, {meta['seeding']}: a batched env is seeded once per run and its workers draw their "
                f"episodes from their own streams (episode i is not a function of seed + i)")
    if isinstance(seed, int) and isinstance(n, int):
        return f"{seed} .. {seed + n - 1} (episode i uses seed {seed} + i)"
    return None


def _json_or_none(value: Any) -> str | None:
    return None if value is None else json.dumps(value, default=str)


def protocol_pairs(card: Any) -> list[tuple[str, Any]]:
    """``("protocol: <setting>", value)`` rows of an env's protocol card (LIBERO's: ``meta["protocol"]``), the
    settings that make two numbers of one benchmark comparable; none without a card."""
    if not isinstance(card, dict):
        return []
    out: list[tuple[str, Any]] = []
    for key, value in card.items():
        if isinstance(value, dict):
            value = ", ".join(f"{k} {v}" for k, v in value.items() if v is not None)
        elif isinstance(value, list):
            value = ", ".join(str(v) for v in value)
        out.append((f"protocol: {key.replace('_', ' ')}", None if value is None else str(value)))
    return out


def relative_cwd(cwd: Any, page_dir: Any) -> str | None:
    """The run's working directory as a path from the page's folder (``../..``), never the absolute path (a page is
    shared: it should not show the machine's folders, issue 42); ``None`` when there is none or no relative path."""
    if not cwd or page_dir is None:
        return None
    import os

    try:
        rel = os.path.relpath(str(cwd), str(Path(page_dir).resolve()))
    except ValueError:  # another drive
        return None
    return rel if not os.path.isabs(rel) else None


ABSOLUTE_IN_TEXT = re.compile(r"(?<![\w.:/~-])/[^\s'\"]+")
"""An absolute POSIX path inside a command line (``-o /home/me/runs/x``, ``--policy=/ck``); not a URL's ``//``."""


def relative_paths(value: Any, page_dir: Any) -> Any:
    """``value`` (a config: nested dicts, lists and strings; or a command line) with every absolute path written
    from the page's folder (``../ck``), as :func:`relative_cwd` does: a page is shared and shows no machine folders
    (issue 42). A path with no relative form (another drive) becomes ``<absolute path>``."""
    if isinstance(value, dict):
        return {k: relative_paths(v, page_dir) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [relative_paths(v, page_dir) for v in value]
    if not isinstance(value, str) or "/" not in value and "\\" not in value:
        return value
    import os

    def rel(path: str) -> str:
        if page_dir is None:
            return "<absolute path>"
        try:
            out = os.path.relpath(path, str(Path(page_dir).resolve()))
        except ValueError:
            return "<absolute path>"
        return out if not os.path.isabs(out) else "<absolute path>"

    if os.path.isabs(value) and "\n" not in value:
        return rel(value)
    return ABSOLUTE_IN_TEXT.sub(lambda m: rel(m.group(0)), value)


def provenance_pairs(inp: RunPageInput) -> list[tuple[str, Any]]:
    """``(label, value)`` rows: what ran, where, with which versions (``None``: not recorded)."""
    prov = dict(inp.provenance or {})
    manifest, meta = dict(inp.manifest or {}), dict(inp.doc.get("meta") or {})
    git = prov.get("git") or {}
    pairs = [
        ("command", relative_paths(prov.get("command"), inp.page_dir)), ("date", prov.get("date")),
        ("working directory (from this page)", relative_cwd(prov.get("cwd"), inp.page_dir)),
        ("policy", _json_or_none(manifest.get("policy") or meta.get("policy") or None)),
        ("policy weight digest (sha256)", manifest.get("policy_digest")),
        *([("each policy's weight digest", ", ".join(f"{k} {v}" for k, v in manifest["policy_digests"].items()))]
          if isinstance(manifest.get("policy_digests"), dict) else []),
        ("env", meta.get("env") or manifest.get("env")),
        ("env kwargs", _json_or_none(manifest.get("env_kwargs", meta.get("env_kwargs")))),
        ("seeds", _seeds_text(manifest, meta)), ("device", meta.get("device")),
        *([("policy call", meta["policy_call"]), ("guarantee", meta["guarantee"])] if meta.get("guarantee") else []),
        *([("noise after a resume", meta[RESUMED_GLOBAL_RNG])] if meta.get(RESUMED_GLOBAL_RNG) else []),
        *protocol_pairs(meta.get("protocol") or manifest.get("protocol")),
        ("git commit", (git.get("commit") or "") + (" (uncommitted changes)" if git.get("dirty") else "") if git else None),
    ]
    if not prov:  # nothing recorded (a sweep cell): say so once instead of a column of blanks
        return [(k, v) for k, v in pairs if v is not None] + [("versions, machine", "not recorded by the sweep store")]
    versions = dict(prov.get("versions") or {})
    versions.setdefault("fasteval", manifest.get("fasteval_version") or meta.get("fasteval_version"))
    pairs += [(f"{name} version", v or ("not installed" if prov.get("versions") else None)) for name, v in versions.items()
              if v is not None or name in ("fasteval", "torch", "gymnasium", "lerobot")]
    mach = prov.get("machine") or {}
    return pairs + [
        ("python", mach.get("python")),
        ("machine", ", ".join(str(x) for x in (mach.get("hostname"), mach.get("platform")) if x) or None),
        ("CPU", f"{mach.get('cpu')} ({mach.get('cpu_count')} cores)" if mach.get("cpu") else None),
        ("memory", f"{mach.get('memory_gib')} GiB" if mach.get("memory_gib") else None),
        ("GPU", mach.get("gpu") or ("none" if mach else None)),
    ]


def _segments_table(segments: list[dict[str, Any]], page_dir: Any) -> str:
    """A resumed run's parts, each with its own command and start."""
    rows = [({"segment": i}, [page.num(i + 1), page.num(seg.get("episodes")), page.num(seg.get("eval_s"), 2),
                              page.text(seg.get("status")), page.text(seg.get("started_at")), page.text(relative_paths(seg.get("command"), page_dir))])
            for i, seg in enumerate(segments)]
    return "<h3>Segments (the run was resumed)</h3>" + page.table(
        "segments", ["segment", "episodes", "engine s", "status", "started", "command"], rows, sortable=False)


def provenance_section(inp: RunPageInput) -> str:
    out = []
    if inp.provenance_is_current:
        out.append(page.note("The run did not record its versions and machine; those below were read when this page was "
                             "written, and may differ from the run's."))
    out.append(page.kv(provenance_pairs(inp)))
    manifest = dict(inp.manifest or {})
    if len(manifest.get("segments") or []) > 1:
        out.append(_segments_table(manifest["segments"], inp.page_dir))
    from fasteval.run.record import manifest_spec

    config = relative_paths(inp.config or manifest_spec(manifest), inp.page_dir)
    if config:
        out.append("<h3>Resolved config</h3><pre id=\"config\">" + escape(json.dumps(config, indent=2, default=str)) + "</pre>")
    links = [f'<a href="{page.relative_href(inp.page_dir / name, inp.page_dir)}">{escape(name)}</a>'
             for name in inp.files if (inp.page_dir / name).is_file()]
    if links:
        out.append("<p>Files: " + " · ".join(links) + " (every episode's record is in episodes.jsonl)</p>")
    return "".join(out)
