"""JS/TS test files, read with tree-sitter and never run: the `describe`/`it`/`test`
declarations, the skips and focus put on each, and the assertions in each test."""

from __future__ import annotations

import functools
from collections.abc import Iterator
from pathlib import PurePosixPath

import tree_sitter_javascript
import tree_sitter_typescript
from tree_sitter import Language, Node, Parser

from gatekeeper.gates.result.versions import FileVersions
from gatekeeper.gates.result.weakening.reading import Reading, Weakening, test_changes

_JS_TEST_DIRS = frozenset({"tests", "test", "__tests__"})
_JS_EXTS = frozenset({"js", "mjs", "cjs", "ts", "mts", "cts", "jsx", "tsx"})

# root callee -> whether it declares a group (describe) rather than a test
_JS_ROOTS = {
    **dict.fromkeys(("it", "test", "specify", "xit", "xtest", "xspecify", "fit"), False),
    **dict.fromkeys(("describe", "suite", "context", "xdescribe", "xcontext"), True),
    "fdescribe": True,
}
_JS_OFF_ROOTS = frozenset({"xit", "xtest", "xspecify", "xdescribe", "xcontext", "fit", "fdescribe"})
_JS_SKIP_MODS = frozenset({"skip", "only", "todo", "skipIf", "runIf", "fails", "fixme", "failing"})
_JS_DECL_MODS = _JS_SKIP_MODS | {
    "each", "for", "concurrent", "sequential", "serial", "parallel", "describe", "shuffle",
}  # fmt: skip
_JS_OPTIONS = frozenset({"skip", "todo", "only"})
_JS_FUNCS = frozenset({"arrow_function", "function_expression", "function", "generator_function"})
_JS_NAMES = frozenset({"string", "template_string"})
_JS_LITERALS = frozenset({"number", "string", "true", "false", "null", "undefined"})
_JS_OFF_VALUES = frozenset({"false", "null", "undefined"})


def is_js_test(path: str) -> bool:
    p = PurePosixPath(path)
    parts = p.name.split(".")
    if len(parts) < 2 or parts[-1] not in _JS_EXTS:
        return False
    named = len(parts) >= 3 and parts[-2] in ("test", "spec")
    return named or not _JS_TEST_DIRS.isdisjoint(p.parts[:-1])


@functools.cache
def _parser(grammar: str) -> Parser:
    languages = {
        "javascript": tree_sitter_javascript.language,
        "typescript": tree_sitter_typescript.language_typescript,
        "tsx": tree_sitter_typescript.language_tsx,
    }
    return Parser(Language(languages[grammar]()))


def _grammar(path: str) -> str:
    ext = PurePosixPath(path).suffix[1:]
    return "typescript" if ext in ("ts", "mts", "cts") else "tsx" if ext == "tsx" else "javascript"


def read_js(path: str, data: bytes | None) -> Reading | None:
    """A JS/TS test file's tests and skips; None when absent or the tree has errors."""
    if data is None:
        return None
    tree = _parser(_grammar(path)).parse(data)
    if tree.root_node.has_error:
        return None
    return _JsScan().read(tree.root_node)


def read_js_tests(fv: FileVersions) -> Iterator[Weakening]:
    yield from test_changes(fv, read_js(fv.path, fv.base), read_js(fv.path, fv.candidate))


def _js_text(node: Node | None) -> str:
    return (node.text or b"").decode("utf-8", "replace") if node is not None else ""


def _js_args(call: Node) -> list[Node]:
    args = call.child_by_field_name("arguments")
    if args is None or args.type != "arguments":
        return []  # a tagged template
    return [a for a in args.named_children if a.type != "comment"]


def _js_chain(node: Node | None, through_calls: bool) -> tuple[str, ...] | None:
    """`it.skip` -> ("it", "skip"); through_calls also reads `it.each(t)` as ("it", "each")."""
    parts: list[str] = []
    while node is not None:
        if node.type in ("identifier", "this"):
            parts.append(_js_text(node))
            return tuple(reversed(parts))
        if node.type == "member_expression":
            parts.append(_js_text(node.child_by_field_name("property")))
            node = node.child_by_field_name("object")
        elif through_calls and node.type == "call_expression":
            node = node.child_by_field_name("function")
        else:
            return None
    return None


def _js_title(node: Node) -> str:
    text = _js_text(node)
    plain = node.type == "string" or (
        node.type == "template_string"
        and not any(c.type == "template_substitution" for c in node.named_children)
    )
    return text[1:-1] if plain else text


def _is_js_declaration(chain: tuple[str, ...], args: list[Node]) -> bool:
    if chain[0] not in _JS_ROOTS or not set(chain[1:]) <= _JS_DECL_MODS or not args:
        return False
    return args[0].type in _JS_NAMES or any(a.type in _JS_FUNCS for a in args[1:])


def _js_option_keys(obj: Node) -> Iterator[str]:
    """`{ skip: true }`, `{ todo: "later" }`, `{ only }`: options that turn a test off."""
    for child in obj.named_children:
        if child.type == "shorthand_property_identifier" and _js_text(child) in _JS_OPTIONS:
            yield _js_text(child)
        elif child.type == "pair":
            key, value = child.child_by_field_name("key"), child.child_by_field_name("value")
            name = _js_title(key) if key is not None else ""
            off = value is None or value.type in _JS_OFF_VALUES or _js_text(value) == "0"
            if name in _JS_OPTIONS and not off:
                yield name


def _js_decl_labels(chain: tuple[str, ...], args: list[Node]) -> list[str]:
    labels = [chain[0]] if chain[0] in _JS_OFF_ROOTS else []
    if not _JS_SKIP_MODS.isdisjoint(chain[1:]):
        labels.append(".".join(chain))
    for arg in args:
        if arg.type == "object":
            labels.extend(f"{{ {key} }} option" for key in _js_option_keys(arg))
    return labels


def _is_js_check(call: Node, chain: tuple[str, ...]) -> bool:
    """`expect(…)`, `expect.*(…)`, `assert(…)`, `assert.*(…)`, `t.assert.*(…)`; one on
    literals only (`assert(true)`, `expect(1).toBe(1)`) is no check."""
    if not (chain[0] in ("assert", "expect") or (len(chain) > 1 and chain[1] == "assert")):
        return False
    args = _js_args(call)
    if chain == ("expect",):
        args += _js_matcher_args(call)
    return not args or not all(a.type in _JS_LITERALS for a in args)


def _js_matcher_args(expect: Node) -> list[Node]:
    """The arguments of the matcher `expect(x)` is chained to: `.toBe(y)`, `.not.toBe(y)`."""
    node = expect
    while node.parent is not None and node.parent.type == "member_expression":
        node = node.parent
    parent = node.parent
    if node is expect or parent is None or parent.type != "call_expression":
        return []
    return _js_args(parent)


def _js_skip_call(chain: tuple[str, ...]) -> str | None:
    """`test.skip()`/`test.fixme(cond)` (Playwright), `t.skip()`/`t.todo()` (node:test),
    `this.skip()` (mocha), `skip()` (a vitest context's)."""
    if chain[0] in _JS_ROOTS and not _JS_SKIP_MODS.isdisjoint(chain[1:]):
        return f"{'.'.join(chain)}() call"
    if chain == ("skip",) or (len(chain) == 2 and chain[1] in ("skip", "todo")):
        return f"{'.'.join(chain)}() call"
    return None


_JsFrame = tuple[Node, tuple[str, ...], str | None]  # node, describe path, enclosing unit


class _JsScan:
    """Walks one tree without recursion: `describe`/`it`/`test` declarations nest names
    (`adds > one`); calls inside a callback count for the innermost test or group."""

    def __init__(self) -> None:
        self.reading = Reading()

    def read(self, root: Node) -> Reading:
        stack: list[_JsFrame] = [(root, (), None)]
        while stack:
            node, path, unit = stack.pop()
            if node.type == "call_expression":
                if self._declaration(node, path, unit, stack):
                    continue
                self._call(node, unit)
            stack.extend((child, path, unit) for child in node.named_children)
        return self.reading

    def _declaration(
        self, call: Node, path: tuple[str, ...], unit: str | None, stack: list[_JsFrame]
    ) -> bool:
        callee, args = call.child_by_field_name("function"), _js_args(call)
        chain = _js_chain(callee, through_calls=True)
        if callee is None or chain is None or not _is_js_declaration(chain, args):
            return False
        group = _JS_ROOTS[chain[0]] or "describe" in chain[1:]
        title = _js_title(args[0])
        name = " > ".join((*path, title))
        declared = self.reading.unit(name)
        declared.skips.update(_js_decl_labels(chain, args))
        body = next((a for a in reversed(args) if a.type in _JS_FUNCS), None)
        if not group:
            declared.tests += 1
            declared.bodies.append(" ".join(_js_text(body).split()))
        stack.extend((n, path, unit) for n in (callee, *args) if n is not body)
        if body is not None:
            stack.append((body, (*path, title) if group else path, name))
        return True

    def _call(self, call: Node, unit: str | None) -> None:
        chain = _js_chain(call.child_by_field_name("function"), through_calls=False)
        if chain is None:
            return
        if unit is not None and _is_js_check(call, chain):
            self.reading.unit(unit).asserts += 1
            return
        label = _js_skip_call(chain)
        if label is not None:
            target = self.reading.unit(unit).skips if unit else self.reading.file_skips
            target[label] += 1
