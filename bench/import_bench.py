"""import_portfolio's files per second, and whether it stays flat as the table grows.

Writes N skill files in DollhouseMCP's portfolio layout (front matter and 60 words of body each,
made by Atrium's own exporter), then imports them with `manage.py import_portfolio` into a fresh
database, reading the command's per-file progress lines as they come: files per second overall,
over the first and the last tenth, and for each tenth. Reading the files alone (parsing their front
matter, no database) is timed apart, in this process.

    .venv/bin/python bench/import_bench.py [--files 10000] [--database-url postgres://postgres@127.0.0.1:5432/postgres]
"""

import argparse
import itertools
import json
import os
import platform
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from elements_bench import database_for
from harness import BASE_DIR, manage, server_env

sys.path.insert(0, str(BASE_DIR))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
os.environ.setdefault("SECRET_KEY", "bench-only")
os.environ.setdefault("DEBUG", "1")

import django

django.setup()

from elements.portfolio import filename_for, iter_portfolio, markdown_from_package  # noqa: E402

WORDS = ["alpha", "beta", "gamma", "delta", "review", "debug", "deploy", "refactor", "test", "python", "rust", "sql",
         "cache", "queue"]


def write_portfolio(root: Path, files: int) -> None:
    rng = random.Random(5)
    folder = root / "skills"
    folder.mkdir(parents=True)
    for index in range(files):
        name = f"skill-{index:06d}"
        package = {"element_type": "skill", "element_name": name, "description": f"Skill number {index}",
                   "content": " ".join(rng.choice(WORDS) for _ in range(60)), "tags": [rng.choice(WORDS)],
                   "version": "1.0.0", "author": "bench", "metadata": {}}
        (folder / f"{filename_for(name)}.md").write_text(markdown_from_package(package))


def imported(env: dict[str, str], root: Path, files: int) -> dict:
    """Run the import, timing each tenth of the files from its progress lines."""
    tenth = max(1, files // 10)
    marks: list[float] = []
    command = subprocess.Popen([sys.executable, "manage.py", "import_portfolio", str(root), "--user", "bench"],
                               cwd=BASE_DIR, env=env, stderr=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    done, other = 0, []
    for line in command.stderr:
        if line[:1].isdigit():
            done += 1
            if done % tenth == 0:
                marks.append(time.perf_counter())
        else:
            other.append(line)
    output = command.stdout.read()
    if command.wait() != 0:
        raise RuntimeError(output[-2000:] + "".join(other)[-3000:])
    # The command reads every file before it writes, and reports a batch's files when the batch
    # commits: the rates are timed from the end of the first tenth, past start-up and reading.
    per_tenth = [round(tenth / (b - a)) for a, b in itertools.pairwise(marks)]
    return {"files": done, "files_per_s": round((marks[-1] - marks[0]) and tenth * (len(marks) - 1)
                                                / (marks[-1] - marks[0])),
            "second_tenth_files_per_s": per_tenth[0], "last_tenth_files_per_s": per_tenth[-1],
            "each_tenth_after_the_first_files_per_s": per_tenth}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--files", type=int, default=10_000)
    parser.add_argument("--database-url")
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="bench-", dir=BASE_DIR / "var"))
    report = {"machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
              "date": time.strftime("%Y-%m-%d"), "database": "postgresql" if args.database_url else "sqlite"}
    try:
        root = workdir / "portfolio"
        write_portfolio(root, args.files)
        began = time.perf_counter()
        read = sum(1 for _ in iter_portfolio(root))
        report["reading_only_files_per_s"] = round(read / (time.perf_counter() - began))
        url, drop = database_for(args.database_url, args.files, workdir)
        env = server_env(url)
        try:
            manage(env, "migrate", "--no-input")
            manage(env, "issue_token", "bench", "--create-user")
            report["import"] = imported(env, root, args.files)
        finally:
            drop()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
