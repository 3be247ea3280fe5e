"""MkDocs hooks for the ckptfs site (mkdocs.yml ``hooks:``).

Three jobs, so that nothing in the site is a hand-made copy that can drift and a new page
needs no edit of a shared file:

* **Files that live outside docs/** are mounted into the site as they are, at the same
  relative path: the normative spec (``spec/``), the latest benchmark results with their plots
  (``bench/results/``) and the conformance suite's README. Their own relative links keep
  working and ``mkdocs build --strict`` checks them like any page's.
* **The CLI reference is generated from the command's own parser**
  (``ckptfs.cli.build_parser``): in a page that holds the line ``<!-- ckptfs-cli-reference -->``
  (up to an optional ``<!-- /ckptfs-cli-reference -->``) that part is replaced with every
  subcommand's usage, description, arguments and epilog, rendered at build time.
* **Pages under docs/guides/, docs/operations/, docs/format/ and docs/conformance/ that
  mkdocs.yml's nav does not name** are appended to their section ("Guides", "Operations",
  "Format and conformance"; by file name), so a new guide shows up at once; naming it in the
  nav places it. A new ``cmd_*.py`` module or option appears without touching the docs.
"""

from __future__ import annotations

import argparse
import glob
import os
import posixpath
import re
from typing import Any

from mkdocs.structure.files import File, Files

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

#: repository folder -> the suffixes mounted from it (recursively), at the same path in the site
MOUNTS: dict[str, tuple[str, ...]] = {
    "spec": (".md", ".cddl", ".json"),
    "bench/results": (".md", ".png"),
}
#: repository files (glob patterns) mounted at the same path: the conformance suite's README
#: and the files beside it that it links to (generators, the frozen vectors' digests)
MOUNT_FILES = ("ckptfs_conformance/*", "ckptfs_conformance/adapters/*.py")

MARKER = "<!-- ckptfs-cli-reference -->"
END_MARKER = "<!-- /ckptfs-cli-reference -->"


def on_files(files: Files, config: Any) -> Files:
    """Add the repository files named in MOUNTS / MOUNT_FILES to the site."""
    paths = [os.path.relpath(p, ROOT) for pattern in MOUNT_FILES
             for p in glob.glob(os.path.join(ROOT, pattern)) if os.path.isfile(p)]
    for folder, suffixes in MOUNTS.items():
        for dirpath, _dirs, names in os.walk(os.path.join(ROOT, folder)):
            for name in sorted(names):
                if name.endswith(suffixes):
                    paths.append(os.path.relpath(os.path.join(dirpath, name), ROOT))
    for rel in sorted(paths):
        src_uri = rel.replace(os.sep, "/")
        if files.get_file_from_path(src_uri) is None:
            files.append(File(src_uri, ROOT, config["site_dir"], config["use_directory_urls"]))
    return files


#: nav sections that take in, at their end, every page of their folder that mkdocs.yml does not
#: name: a helper who writes docs/guides/foo.md sees it in the site without editing the nav
AUTO_SECTIONS: dict[str, tuple[str, ...]] = {
    "Guides": ("guides/",), "Operations": ("operations/",),
    "Format and conformance": ("format/", "conformance/")}


def on_nav(nav: Any, config: Any, files: Files) -> Any:
    """Append the pages of AUTO_SECTIONS' folders that the nav leaves out, by path."""
    named = {p.file.src_uri for p in nav.pages}
    for section in nav.items:
        prefix = AUTO_SECTIONS.get(getattr(section, "title", None) or "")
        if prefix is None or not hasattr(section, "children"):
            continue
        for f in sorted(files.documentation_pages(), key=lambda f: f.src_uri):
            if f.src_uri.startswith(prefix) and f.src_uri not in named and f.page is not None:
                f.page.parent = section
                section.children.append(f.page)
                nav.pages.append(f.page)
                named.add(f.src_uri)
    return nav


#: a Markdown link whose target is a relative folder (``[text](vectors/)``)
FOLDER_LINK = re.compile(r"\[([^\]]*)\]\((?![a-z]+:|/|#)([^)\s]*/)\)")


def _folder_links(markdown: str, src_uri: str) -> str:
    """In a page mounted from the repository, a link to a folder of the repository (which the
    site cannot hold) becomes its text and the folder's repository path, so that the page reads
    the same on GitHub and ``--strict`` does not fail on it."""
    def repl(m: re.Match[str]) -> str:
        rel = posixpath.normpath(posixpath.join(posixpath.dirname(src_uri), m.group(2)))
        if rel.startswith("..") or not os.path.isdir(os.path.join(ROOT, rel)):
            return m.group(0)
        return f"{m.group(1)} (folder `{rel}/` of the repository)"
    return FOLDER_LINK.sub(repl, markdown)


def on_page_markdown(markdown: str, page: Any, config: Any, files: Files) -> str:
    """Replace the CLI marker with the reference rendered from ``build_parser()``; in pages
    mounted from outside docs/, turn links to repository folders into their paths."""
    if page.file.abs_src_path and not os.path.abspath(page.file.abs_src_path).startswith(
            os.path.join(ROOT, "docs") + os.sep):
        markdown = _folder_links(markdown, page.file.src_uri)
    if MARKER not in markdown:
        return markdown
    head, _, rest = markdown.partition(MARKER)
    _, found, tail = rest.partition(END_MARKER)  # what stands between is for readers of the
    return head + cli_reference() + (tail if found else rest)  # source (e.g. on GitHub)


def cli_reference() -> str:
    """Markdown for the ``ckptfs`` command and each subcommand, from the argparse parser."""
    from ckptfs.cli import build_parser

    parser = build_parser()
    parser.prog = "ckptfs"
    out = [_usage(parser), _esc(parser.description or ""), "", _arguments(parser),
           _esc(parser.epilog or ""), ""]
    sub = _subparsers(parser)
    if sub is None:
        return "\n".join(out)
    helps = {a.dest: a.help or "" for a in sub._choices_actions}
    out += ["| command | what it does |", "|---|---|"]
    out += [f"| [`{name}`](#ckptfs-{name}) | {_cell(helps.get(name, ''))} |"
            for name in sorted(sub.choices)]
    out.append("")
    for name in sorted(sub.choices):
        out += _command(sub.choices[name], ["ckptfs", name], helps.get(name, ""))
    return "\n".join(out)


def _command(p: argparse.ArgumentParser, words: list[str], summary: str) -> list[str]:
    anchor = "-".join(words)
    out = [f"## `{' '.join(words)}` {{ #{anchor} }}", ""]
    if summary:
        out += [f"*{_esc(summary)}*", ""]
    out += [_usage(p), ""]
    if p.description:
        out += [_esc(p.description), ""]
    out += [_arguments(p)]
    if p.epilog:
        out += [_esc(p.epilog), ""]
    sub = _subparsers(p)
    if sub is not None:
        helps = {a.dest: a.help or "" for a in sub._choices_actions}
        for name in sorted(sub.choices):
            out += _command(sub.choices[name], [*words, name], helps.get(name, ""))
    return out


def _subparsers(p: argparse.ArgumentParser) -> Any:
    return next((a for a in p._actions if isinstance(a, argparse._SubParsersAction)), None)


def _usage(p: argparse.ArgumentParser) -> str:
    fmt = argparse.HelpFormatter(p.prog, width=100)
    fmt.add_usage(p.usage, p._actions, p._mutually_exclusive_groups)
    return "```text\n" + fmt.format_help().strip() + "\n```\n"


def _arguments(p: argparse.ArgumentParser) -> str:
    rows = []
    for a in p._actions:
        if isinstance(a, (argparse._HelpAction, argparse._SubParsersAction)):
            continue
        if a.help == argparse.SUPPRESS:
            continue
        if a.option_strings:
            name = ", ".join(a.option_strings)
            if a.nargs != 0:
                metavar = a.metavar or (a.dest.upper() if not a.choices else
                                        "{" + ",".join(map(str, a.choices)) + "}")
                name += " " + (" ".join(metavar) if isinstance(metavar, tuple) else metavar)
        else:
            name = str(a.metavar or a.dest)
        text = a.help or ""
        if "%" in text:  # argparse's own formatting: %(default)s, %%
            try:
                text = text % {**vars(a), "prog": p.prog}
            except (KeyError, TypeError, ValueError):
                pass
        default = a.default
        if (a.option_strings and a.nargs != 0 and default not in (None, [], "", False)
                and default is not argparse.SUPPRESS and "default" not in text):
            text += f" (default: `{default}`)"
        rows.append(f"| `{name}` | {_cell(text)} |")
    if not rows:
        return ""
    return "\n".join(["| argument | meaning |", "|---|---|", *rows, ""])


def _esc(text: str) -> str:
    """argparse text is plain: keep Markdown from reading ``*``, ``_`` or ``<`` as markup."""
    return (text.replace("\\", "\\\\").replace("*", "\\*").replace("_", "\\_")
            .replace("<", "&lt;").replace("`", "\\`"))


def _cell(text: str) -> str:
    return _esc(" ".join(text.split())).replace("|", "\\|")
