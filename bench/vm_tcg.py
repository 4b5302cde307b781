"""Issue 25, lever 3: what TCG's translation-cache size (`-accel tcg,tb-size=`) and the
guest kernel's speculative-execution mitigations (`mitigations=off`) cost or save, each
arm against the others in one run (rounds interleaved A B C A B C ..., medians).

Each arm sets machine.TCG_TB_SIZE_MIB and machine.TCG_KERNEL_WORDS in a lint process of
its own (`python -c`, then the CLI's main), so every arm runs the project's own VM path;
each arm's first lint is unmeasured (it builds that arm's template: the key covers both
knobs). Per lint: wall seconds, its `clippy` progress stage, the CPU seconds of the lint
and everything it waited for (qemu's CPU time dominates: wait4's rusage), and the largest
RSS among them (qemu's: the guest RAM it touched plus the translation cache it filled).

Trees: the demo workspace (its clippy stage) and the serde-derive workspace of
bench/pr_lint.py linted with `--no-dep-cache` (serde_derive, syn, proc-macro2 ... compiled
in the lint's VM on every run: a compile-heavy guest run). A tree of a crate whose
compile errors print the guest's /sys/devices/system/cpu/vulnerabilities files and
/proc/cmdline (`--vulns`) shows which mitigations the guest kernel turns on.

    PYTHONPATH=. .venv/bin/python bench/vm_tcg.py --home H [--rounds 3] [--arms 64,256,512,64m]
        [--trees demo,macro,serde] [--vulns]

H: a ROTEIRO_HOME that holds the VM assets, the linter image (config.toml's lint.image) and
its root filesystem. An arm is `<tb-size MiB>` or `<tb-size MiB>m` (m: mitigations=off).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from pr_lint import cargo_home, empty_crate, workspace  # bench/ is the script's directory

ROOT = Path(__file__).resolve().parent.parent
STAGE = re.compile(r"^(?P<name>\S(?:.*\S)?) +(?P<seconds>\d+\.\d) s$")
CHILD = ("import sys; from roteiro_py.vm.qemu import machine; "
         "machine.TCG_TB_SIZE_MIB = int(sys.argv[1]); "
         "machine.TCG_KERNEL_WORDS = tuple(sys.argv[2].split()); "
         "from roteiro_py.cli.app import main; sys.exit(main(sys.argv[3:]))")


def arm_words(arm: str) -> tuple[str, str]:
    return arm.rstrip("m"), "mitigations=off" if arm.endswith("m") else ""


def lint(arm: str, tree: Path, env: dict[str, str], extra: list[str]) -> dict[str, object]:
    size, words = arm_words(arm)
    argv = [sys.executable, "-c", CHILD, size, words, "lint", "clippy", str(tree),
            "--accel", "tcg", "--format", "json", *extra]
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        started = time.perf_counter()
        child = subprocess.Popen(argv, env=env, stdout=out, stderr=err)
        _, status, usage = os.wait4(child.pid, 0)
        wall = time.perf_counter() - started
        child.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read().decode(), err.read().decode()
    if child.returncode not in (0, 1):
        sys.exit(f"arm {arm}: lint exited {child.returncode}:\n{stderr[-3000:]}")
    found = {m["name"]: float(m["seconds"]) for m in map(STAGE.match, stderr.splitlines()) if m}
    return {"wall": wall, "clippy": found.get("clippy", float("nan")),
            "cpu": usage.ru_utime + usage.ru_stime, "rss_mib": usage.ru_maxrss / 1024,
            "stdout": stdout}


def macro_tree(path: Path) -> Path:
    """A workspace whose proc-macro member uses proc-macro2 and quote (and unicode-ident
    under them): a lint of it compiles a build script and three crates to machine code
    (LLVM's code, which a check of a library never runs), in a few minutes under TCG
    where the serde-derive tree's syn takes tens."""
    (path / "macros" / "src").mkdir(parents=True)
    (path / "app" / "src").mkdir(parents=True)
    (path / "Cargo.toml").write_text('[workspace]\nmembers = ["macros", "app"]\nresolver = "2"\n')
    (path / "macros" / "Cargo.toml").write_text(
        '[package]\nname = "macros"\nversion = "0.1.0"\nedition = "2021"\n[lib]\nproc-macro = true\n'
        '[dependencies]\nproc-macro2 = "=1.0.95"\nquote = "=1.0.40"\n')
    (path / "macros" / "src" / "lib.rs").write_text(
        "use proc_macro::TokenStream;\nuse quote::quote;\n\n#[proc_macro]\n"
        "pub fn answer(_: TokenStream) -> TokenStream {\n"
        "    let n = proc_macro2::Literal::i64_unsuffixed(42);\n"
        "    quote!(pub fn answer() -> i64 { return #n; }).into()\n}\n")
    (path / "app" / "Cargo.toml").write_text(
        '[package]\nname = "app"\nversion = "0.1.0"\nedition = "2021"\n'
        '[dependencies]\nmacros = { path = "../macros" }\n')
    (path / "app" / "src" / "main.rs").write_text("macros::answer!();\n\nfn main() { println!(\"{}\", answer()); }\n")
    return path


def vulns_tree(path: Path) -> Path:
    names = ("meltdown", "spectre_v1", "spectre_v2", "spec_store_bypass", "l1tf", "mds",
             "tsx_async_abort", "itlb_multihit", "srbds", "mmio_stale_data", "retbleed",
             "gather_data_sampling", "spec_rstack_overflow", "reg_file_data_sampling")
    (path / "src").mkdir(parents=True)
    (path / "Cargo.toml").write_text('[package]\nname = "vulns"\nversion = "0.1.0"\nedition = "2021"\n')
    (path / "Cargo.lock").write_text('version = 4\n\n[[package]]\nname = "vulns"\nversion = "0.1.0"\n')
    lines = [f'compile_error!(concat!("{n}: ", include_str!("/sys/devices/system/cpu/'
             f'vulnerabilities/{n}")));' for n in names]
    lines.append('compile_error!(concat!("cmdline: ", include_str!("/proc/cmdline")));')
    (path / "src" / "lib.rs").write_text("\n".join(lines) + "\n")
    return path


def messages(stdout: str) -> list[str]:
    """Every diagnostic message text in a lint's JSON report, wherever it sits."""
    found: list[str] = []

    def walk(node: object) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if key == "message" and isinstance(value, str):
                    found.append(value)
                else:
                    walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)
    walk(json.loads(stdout))
    return found


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--home", type=Path, required=True)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--arms", default="64,256,512,64m")
    parser.add_argument("--trees", default="demo,serde")
    parser.add_argument("--registry-arms", default=None,
                        help="the serde and macro trees' arms (default: --arms)")
    parser.add_argument("--vulns", action="store_true")
    args = parser.parse_args()
    arms = args.arms.split(",")
    env = {**os.environ, "ROTEIRO_HOME": str(args.home.resolve())}
    env.pop("CI", None)
    with tempfile.TemporaryDirectory(prefix="bench-tcg-") as scratch:
        work = Path(scratch)
        if args.vulns:
            tree = vulns_tree(work / "vulns")
            for arm in dict.fromkeys(a.endswith("m") for a in arms):
                name = "64m" if arm else "64"
                shown = [m for m in messages(lint(name, tree, env, [])["stdout"])
                         if ":" in m and "include" not in m]
                print(f"arm {name}: " + "\n  ".join(["", *sorted(set(shown))]))
        trees: dict[str, tuple[Path, dict[str, str], list[str]]] = {}
        tree_arms = {"demo": arms, "serde": (args.registry_arms or args.arms).split(","),
                     "macro": (args.registry_arms or args.arms).split(",")}
        for name in args.trees.split(","):
            if name == "demo":
                trees[name] = (ROOT / "examples" / "demo-workspace", env, [])
            elif name in ("serde", "macro"):
                tree = (workspace if name == "serde" else macro_tree)(work / name)
                (work / f"crates-{name}").mkdir()  # outside the tree (the lint refuses it inside)
                crates = cargo_home(work / f"crates-{name}", tree)
                registry_env = {**env, "CARGO_HOME": str(crates)}
                subprocess.run([sys.executable, "-c", CHILD, "64", "", "fetch-deps", str(tree)],
                               env=registry_env, check=True, capture_output=True)
                trees[name] = (tree, registry_env, ["--no-dep-cache"])
        for name, (tree, tree_env, extra) in trees.items():
            arms = tree_arms[name]
            empty = empty_crate(work / f"empty-{name}")
            for arm in arms:  # each arm's template (this tree's shape), unmeasured
                lint(arm, empty, tree_env, extra)
            runs: dict[str, list[dict[str, object]]] = {arm: [] for arm in arms}
            for index in range(args.rounds):
                order = arms[index % len(arms):] + arms[:index % len(arms)]  # rotated
                for arm in order:
                    result = lint(arm, tree, tree_env, extra)
                    runs[arm].append(result)
                    print(f"{name} round {index} arm {arm}: wall {result['wall']:.1f} "
                          f"clippy {result['clippy']:.1f} cpu {result['cpu']:.1f} "
                          f"rss {result['rss_mib']:.0f} MiB", flush=True)
            # a round's arms ran side by side: each arm's ratio to the first arm is taken
            # within its round, and the ratios' median reported (the load moved between rounds)
            print(f"{name}: arm | clippy stage s | vs {arms[0]} | lint CPU s | vs {arms[0]} | "
                  "max RSS MiB (medians; ratios: median of the per-round ratios)")
            for arm in arms:
                med = {k: statistics.median(float(r[k]) for r in runs[arm])  # type: ignore[arg-type]
                       for k in ("clippy", "cpu", "rss_mib")}
                ratio = {k: statistics.median(float(r[k]) / float(b[k])  # type: ignore[arg-type]
                                              for r, b in zip(runs[arm], runs[arms[0]], strict=True))
                         for k in ("clippy", "cpu")}
                print(f"{name}: {arm} | {med['clippy']:.1f} | {ratio['clippy']:.3f} | "
                      f"{med['cpu']:.1f} | {ratio['cpu']:.3f} | {med['rss_mib']:.0f}", flush=True)


if __name__ == "__main__":
    main()
