"""A small reader of deploy/Dockerfile and .dockerignore, enough to check the image without building it.

This machine has a Docker client but no engine, so the image is checked by reading: the instructions
(continuation lines joined, comments dropped) and Docker's ignore-file matching (``*``, ``?``, ``**``,
``!`` re-inclusion, last match wins).
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Instruction:
    """One Dockerfile instruction."""

    keyword: str  # upper-cased, e.g. COPY
    flags: tuple[str, ...]  # leading --flags, e.g. ("--from=build",)
    args: tuple[str, ...]  # the rest: exec-form JSON list items, or shell words


def read_dockerfile(path: Path) -> list[Instruction]:
    """Parse the Dockerfile at ``path`` into instructions, in order."""
    text = re.sub(r"\\\n", " ", path.read_text())
    instructions = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        keyword, _, rest = line.partition(" ")
        instructions.append(_instruction(keyword.upper(), rest.strip()))
    return instructions


def _instruction(keyword: str, rest: str) -> Instruction:
    match = re.match(r"((?:--\S+\s+)*)(.*)", rest, re.DOTALL)
    assert match is not None  # the pattern matches any text
    flags, body = tuple(match.group(1).split()), match.group(2).strip()
    if keyword == "HEALTHCHECK":  # HEALTHCHECK [--flags] CMD <command> | NONE
        sub, _, body = body.partition(" ")
        return Instruction(keyword, flags, (sub.upper(), *_words(body.strip())))
    return Instruction(keyword, flags, _words(body))


def _words(body: str) -> tuple[str, ...]:
    """Exec form (a JSON list) or shell form (split like a shell would)."""
    if body.startswith("["):
        return tuple(str(item) for item in json.loads(body))
    return tuple(shlex.split(body))


def stages(instructions: list[Instruction]) -> list[list[Instruction]]:
    """Split the instructions into build stages (each starts at a FROM)."""
    result: list[list[Instruction]] = []
    for ins in instructions:
        if ins.keyword == "FROM":
            result.append([])
        if result:
            result[-1].append(ins)
    return result


def _pattern_regex(pattern: str) -> re.Pattern[str]:
    out, i = "", 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out, i = out + "(?:.*/)?", i + 3
        elif pattern.startswith("**", i):
            out, i = out + ".*", i + 2
        elif pattern[i] == "*":
            out, i = out + "[^/]*", i + 1
        elif pattern[i] == "?":
            out, i = out + "[^/]", i + 1
        else:
            out, i = out + re.escape(pattern[i]), i + 1
    return re.compile(out + r"(?:/.*)?\Z")  # a matched directory excludes everything below it


@dataclass(frozen=True)
class DockerIgnore:
    """The rules of a ``.dockerignore`` file; ``ignores(path)`` says whether a build sees the path."""

    rules: tuple[tuple[bool, re.Pattern[str]], ...]  # (is re-inclusion, pattern), file order

    @classmethod
    def read(cls, path: Path) -> DockerIgnore:
        """Read the ignore file; comments and blank lines are skipped as Docker does."""
        rules = []
        for line in path.read_text().splitlines():
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            negated = line.startswith("!")
            rules.append((negated, _pattern_regex(line.lstrip("!").strip("/"))))
        return cls(tuple(rules))

    def ignores(self, relpath: str) -> bool:
        """Whether ``relpath`` (relative to the context root) is left out of the build context."""
        ignored = False
        for negated, regex in self.rules:
            if regex.match(relpath.strip("/")):
                ignored = not negated
        return ignored
