# execcritic canary planner. Runs inside the sandbox as `python -I -S canary.py SPEC` after the
# patches are applied and BEFORE any repository code runs (isolated: no site, no working
# directory on sys.path, so nothing of the workspace is imported). Standard library only, Python
# 3.5-compatible.
#
# For every judged test function it rewrites the test file so that the function runs under a
# fresh random name, next to MUTANTS: copies whose only difference is one expected literal of an
# assertion that a passing run must execute (`assert X == 5` -> `assert X == 6`), each under its
# own random name, in random order. The real test and its mutants are exchangeable (see
# `alternatives`): nothing but the expected value itself tells them apart. A run in which the real test passes must report every mutant
# as failed: an object equal to everything, neutered assertions, flipped reports or a forged
# summary pass the mutants too. Must-fail and must-pass CONTROLS (no repository code) are
# appended to each file. The mapping (which random name is the real test) is printed on stdout,
# which the harness reads and the code under test cannot; it is written nowhere else. The new
# selection (node ids / labels) is written to the args file named in the spec.
import ast
import io
import json
import os
import random
import sys
import tokenize

PREFIX = "@@EXECCRITIC-CANARY@@"
rng = random.SystemRandom()
ALPHA = "abcdefghijklmnopqrstuvwxyz0123456789"


def rand_name(taken, prefix="test_"):
    while True:
        n = prefix + rng.choice("abcdefghijklmnopqrstuvwxyz") + "".join(rng.choice(ALPHA) for _ in range(7))
        if n not in taken:
            taken.add(n)
            return n


def literal_value(node):
    """(kind, value) of a literal expression, or None."""
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        inner = literal_value(node.operand)
        if inner and inner[0] in ("int", "float"):
            return inner[0], -inner[1]
        return None
    if hasattr(ast, "Constant") and isinstance(node, ast.Constant):
        v = node.value
    elif isinstance(node, getattr(ast, "Num", ())):
        v = node.n
    elif isinstance(node, getattr(ast, "Str", ())):
        v = node.s
    elif isinstance(node, getattr(ast, "Bytes", ())):
        v = node.s
    elif isinstance(node, getattr(ast, "NameConstant", ())):
        v = node.value
    else:
        return None
    if isinstance(v, bool):
        return "bool", v
    if isinstance(v, int):
        return "int", v
    if isinstance(v, float):
        return "float", v
    if isinstance(v, str):
        return "str", v
    if isinstance(v, bytes):
        return "bytes", v
    return None


def alternatives(kind, value, original, k):
    """Up to k literals to replace `original` (source text of `value`) with, such that the
    original and its alternatives are EXCHANGEABLE: nothing about the set (its median, its
    centre, the position that differs, the spelling) tells which one is the original.
    - numbers: k + 1 distinct values on a grid (step 1, or the literal's last decimal) in a
      window that holds the original at a uniformly random position, written like the original
      (base, decimals);
    - strings and bytes: one position of the literal, k + 1 distinct characters of its class
      there (the original's among them), everything else equal;
    - booleans: the other one."""
    out = []
    if kind == "bool":
        return [repr(not value)]
    if kind in ("int", "float"):
        body = original.lstrip("-").lower()
        if kind == "float" and ("e" in body or "inf" in body or "nan" in body or "_" in body):
            return []
        if kind == "int" and "_" in body:
            return []
        decimals = len(body.split(".", 1)[1]) if kind == "float" and "." in body else 0
        step = 10 ** -decimals if kind == "float" else 1
        width = max(2 * (k + 1), k + 1)
        offset = rng.randrange(width)  # where the original sits in the window
        grid = [i - offset for i in range(width) if i != offset]
        rng.shuffle(grid)
        for i in grid[:k]:
            if kind == "int":
                new = value + i
                if body.startswith("0x"):
                    text = ("-" if new < 0 else "") + "0x%x" % abs(new)
                elif body.startswith("0o"):
                    text = ("-" if new < 0 else "") + "0o%o" % abs(new)
                elif body.startswith("0b"):
                    text = ("-" if new < 0 else "") + "0b" + bin(abs(new))[2:]
                else:
                    text = str(new)
            else:
                text = ("%." + str(max(decimals, 1)) + "f") % (value + i * step)
            out.append(text)
        return [t for t in out if valid_alternative(t, kind, value)]
    if kind in ("str", "bytes"):
        i = 0
        while i < len(original) and original[i] not in "'\"":
            i += 1
        prefix, rest = original[:i], original[i:]
        if "f" in prefix.lower() or "r" in prefix.lower():
            return []
        q = rest[:3] if rest[:3] in ('"""', "'''") else rest[:1]
        if not rest.endswith(q) or len(rest) < 2 * len(q):
            return []
        body = rest[len(q):len(rest) - len(q)]
        spots = [j for j, ch in enumerate(body) if ch.isalnum() and ord(ch) < 128
                 and not (j > 0 and body[j - 1] == "\\")]
        if not spots:
            return []
        j = rng.choice(spots)
        ch = body[j]
        pool = "abcdefghijklmnopqrstuvwxyz" if ch.islower() else \
            ("ABCDEFGHIJKLMNOPQRSTUVWXYZ" if ch.isupper() else "0123456789")
        others = [c for c in pool if c != ch]
        rng.shuffle(others)
        for c in others[:k]:
            text = prefix + q + body[:j] + c + body[j + 1:] + q
            if valid_alternative(text, kind, value):
                out.append(text)
        return out
    return []


def valid_alternative(text, kind, value):
    try:
        parsed = ast.literal_eval(text)
    except Exception:
        return False
    return parsed != value and type(parsed) is type(value)


UNITTEST_EQ = ("assertEqual", "assertEquals", "failUnlessEqual", "assertIs")


def own_nodes(func):
    """Every node of a function's own body, not descending into nested functions, lambdas or
    classes (their `return`s are not the test's)."""
    fdefs = (ast.FunctionDef, getattr(ast, "AsyncFunctionDef", ast.FunctionDef), ast.Lambda, ast.ClassDef)
    stack = list(func.body)
    while stack:
        n = stack.pop()
        yield n
        if isinstance(n, fdefs):
            continue
        stack.extend(ast.iter_child_nodes(n))


def eligible_sites(func, lines):
    """Literal operands of assertions that run whenever the function passes: top-level statements
    of a body with no `return`/`yield`. Each site: (line, col_start, col_end, kind, value)."""
    stops = (ast.Return, ast.Yield, getattr(ast, "YieldFrom", ast.Yield))
    if any(isinstance(n, stops) for n in own_nodes(func)):
        return []
    sites = []
    for stmt in func.body:
        target = None
        if isinstance(stmt, ast.Assert):
            t = stmt.test
            if isinstance(t, ast.Compare) and len(t.ops) == 1:
                op = t.ops[0]
                left, right = t.left, t.comparators[0]
                if isinstance(op, ast.Eq):
                    for side in (right, left):
                        lv = literal_value(side)
                        if lv is not None:
                            target = (side, lv)
                            break
                elif isinstance(op, ast.Is):
                    lv = literal_value(right)
                    if lv is not None and lv[0] == "bool":
                        target = (right, lv)
        elif isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
            call = stmt.value
            f = call.func
            if isinstance(f, ast.Attribute) and f.attr in UNITTEST_EQ and len(call.args) >= 2 \
                    and isinstance(f.value, ast.Name) and f.value.id == "self":
                for side in (call.args[1], call.args[0]):
                    lv = literal_value(side)
                    if lv is not None and (f.attr != "assertIs" or lv[0] == "bool"):
                        target = (side, lv)
                        break
        if target is None:
            continue
        node, (kind, value) = target
        span = token_span(lines, node)
        if span is not None:
            sites.append(span + (kind, value))
    return sites


def token_span(lines, node):
    """(line index, char start, char end) of a literal expression that sits on one line."""
    li = node.lineno - 1
    if li >= len(lines):
        return None
    line = lines[li]
    # col_offset is in UTF-8 bytes
    raw = line.encode("utf-8")
    start = len(raw[:node.col_offset].decode("utf-8", "replace"))
    try:
        toks = list(tokenize.generate_tokens(io.StringIO(line[start:] + "\n").readline))
    except Exception:
        return None
    if not toks:
        return None
    first = toks[0]
    if first.type == tokenize.OP and first.string == "-":
        if len(toks) < 2 or toks[1].type != tokenize.NUMBER:
            return None
        end = toks[1].end
    elif first.type in (tokenize.NUMBER, tokenize.STRING) or (first.type == tokenize.NAME and first.string in ("True", "False")):
        end = first.end
        # implicit string concatenation ("a" "b") is left alone
        if first.type == tokenize.STRING and len(toks) > 1 and toks[1].type == tokenize.STRING:
            return None
    else:
        return None
    if end[0] != 1:
        return None
    return li, start, start + end[1]


def func_span(tree, func, parent_body, lines):
    """(first line index incl. decorators, last line index) of a function in its parent body."""
    start = func.lineno - 1
    for d in getattr(func, "decorator_list", []):
        start = min(start, d.lineno - 1)
    end = getattr(func, "end_lineno", None)
    if end is not None:
        end = end - 1
    else:
        idx = parent_body.index(func)
        if idx + 1 < len(parent_body):
            nxt = parent_body[idx + 1]
            nstart = nxt.lineno - 1
            for d in getattr(nxt, "decorator_list", []):
                nstart = min(nstart, d.lineno - 1)
            end = nstart - 1
        else:
            end = len(lines) - 1
            indent = len(lines[func.lineno - 1]) - len(lines[func.lineno - 1].lstrip())
            # the parent (a class) ends where a line is indented no deeper than the class
            if parent_body is not tree.body:
                for j in range(func.lineno, len(lines)):
                    s = lines[j]
                    if s.strip() and not s.lstrip().startswith("#") and len(s) - len(s.lstrip()) < indent:
                        end = j - 1
                        break
        while end > func.lineno - 1 and (not lines[end].strip() or lines[end].lstrip().startswith("#")):
            end -= 1
    return start, end


def find_functions(tree):
    """{(class or None, name): (func node, parent body)} for module-level and class-level defs."""
    out = {}
    fdefs = (ast.FunctionDef, getattr(ast, "AsyncFunctionDef", ast.FunctionDef))
    for node in tree.body:
        if isinstance(node, fdefs):
            out[(None, node.name)] = (node, tree.body)
        elif isinstance(node, ast.ClassDef):
            for sub in node.body:
                if isinstance(sub, fdefs):
                    out[(node.name, sub.name)] = (sub, node.body)
    return out


def name_used_elsewhere(source_tokens, name, def_lines):
    for tok in source_tokens:
        if tok.type == tokenize.NAME and tok.string == name and tok.start[0] - 1 not in def_lines:
            return True
    return False


def plan_file(path, source, wanted, style, per_node, taken):
    lines = source.split("\n")
    tree = ast.parse(source, path)
    funcs = find_functions(tree)
    try:
        toks = list(tokenize.generate_tokens(io.StringIO(source).readline))
    except Exception:
        toks = []
    for t in toks:
        if t.type == tokenize.NAME:
            taken.add(t.string)
    edits = []  # (start line idx, end line idx, replacement lines)
    groups = []
    for (cls, name) in wanted:
        matches = [(k, v) for k, v in funcs.items() if k[1] == name and (cls is None or k[0] == cls)]
        for (kcls, kname), (func, body) in matches:
            start, end = func_span(tree, func, body, lines)
            if name_used_elsewhere(toks, kname, set([func.lineno - 1])):
                groups.append({"path": path, "cls": kcls, "name": kname, "real": None, "mutants": [],
                               "why": "name referenced elsewhere"})
                continue
            block = lines[start:end + 1]
            def_idx = func.lineno - 1 - start
            sites = eligible_sites(func, lines)
            real = rand_name(taken)
            variants = [("real", real, None)]
            # Every mutant of a group changes the SAME literal (chosen at random among the
            # eligible ones): with several sites, the original value would be the one most
            # members share.
            rng.shuffle(sites)
            for li, cs, ce, kind, value in sites:
                alts = alternatives(kind, value, lines[li][cs:ce], per_node)
                if not alts:
                    continue
                for text in alts:
                    variants.append(("mutant", rand_name(taken), (li - start, cs, ce, text)))
                break
            rng.shuffle(variants)
            out = []
            mutants = []
            for role, new, edit in variants:
                b = list(block)
                b[def_idx] = rename_def(b[def_idx], kname, new)
                if edit is not None:
                    li, cs, ce, text = edit
                    b[li] = b[li][:cs] + text + b[li][ce:]
                    mutants.append(new)
                out.extend(b)
                out.append("")
            edits.append((start, end, out))
            groups.append({"path": path, "cls": kcls, "name": kname, "real": real, "mutants": mutants})
    edits.sort(key=lambda e: e[0], reverse=True)
    for start, end, rep in edits:
        lines[start:end + 1] = rep
    controls = []
    a, b = rng.randint(2, 90), rng.randint(2, 90)
    wrong = a + b + rng.choice([-1, 1]) * rng.randint(1, 9)
    fail_name, pass_name = rand_name(taken), rand_name(taken)
    if style == "unittest":
        cls_name = rand_name(taken, "Test")
        lines += ["", "", "class %s(__import__('unittest').TestCase):" % cls_name,
                  "    def %s(self):" % fail_name,
                  "        self.assertEqual(%d + %d, %d)" % (a, b, wrong), "",
                  "    def %s(self):" % pass_name,
                  "        self.assertEqual(%d + %d, %d)" % (b, a, a + b), ""]
        controls = [{"path": path, "cls": cls_name, "name": fail_name, "expect": "fail"},
                    {"path": path, "cls": cls_name, "name": pass_name, "expect": "pass"}]
    else:
        lines += ["", "", "def %s():" % fail_name, "    assert %d + %d == %d" % (a, b, wrong), "", "",
                  "def %s():" % pass_name, "    assert %d + %d == %d" % (b, a, a + b), ""]
        controls = [{"path": path, "cls": None, "name": fail_name, "expect": "fail"},
                    {"path": path, "cls": None, "name": pass_name, "expect": "pass"}]
    return "\n".join(lines), groups, controls


def rename_def(line, old, new):
    i = line.find("def " + old)
    while i >= 0:
        j = i + 4 + len(old)
        if j >= len(line) or not (line[j].isalnum() or line[j] == "_"):
            return line[:i + 4] + new + line[j:]
        i = line.find("def " + old, i + 1)
    return line


def selectors(node, group_or_control, form):
    """Selectors running one real test, its mutants, or a control, in the command's form."""
    path, cls = node["path"], group_or_control.get("cls")
    names = [group_or_control["real"]] + group_or_control["mutants"] if "real" in group_or_control \
        else [group_or_control["name"]]
    param = node.get("param") or ""
    out = []
    for n in names:
        if n is None:
            continue
        if form == "pytest":
            out.append("::".join([path] + ([cls] if cls else []) + [n]) + param)
        elif form == "label":
            out.append(".".join([node["module"]] + ([cls] if cls else []) + [n]))
        else:
            out.append(n)
    return out


def main():
    spec_path = sys.argv[1]
    with open(spec_path, "rb") as f:
        spec = json.loads(f.read().decode("utf-8"))
    c = spec.get("canary") or {}
    ws = spec.get("workspace", "/testbed")
    style = c.get("style", "pytest")
    per_node = int(c.get("mutants", 4))
    nodes = c.get("nodes", [])
    by_file = {}
    for node in nodes:
        key = (node.get("cls"), node["name"])
        if key not in by_file.setdefault(node["path"], []):
            by_file[node["path"]].append(key)
    result = {"groups": [], "controls": [], "errors": []}
    taken = set()
    for path in sorted(by_file):
        full = os.path.join(ws, path)
        try:
            with open(full, "rb") as f:
                source = f.read().decode("utf-8")
            new, groups, controls = plan_file(path, source, by_file[path], style, per_node, taken)
            with open(full, "wb") as f:
                f.write(new.encode("utf-8"))
        except Exception as e:
            result["errors"].append({"path": path, "error": "%s: %s" % (type(e).__name__, e)})
            continue
        result["groups"].extend(groups)
        result["controls"].extend(controls)
    args_file = c.get("args_file")
    if args_file:
        args = []
        done_controls = set()
        kw_at = None
        kw_names = []
        for item in c.get("args", []):
            if "lit" in item:
                args.append(item["lit"])
                continue
            form = item.get("form", "pytest")
            sel = []
            node = nodes[item["node"]]
            for g in result["groups"]:
                if g["path"] == node["path"] and g["name"] == node["name"] and (node.get("cls") is None or g["cls"] == node.get("cls")):
                    if g["real"] is None:
                        sel += selectors(node, {"cls": g["cls"], "name": g["name"]}, form)
                    else:
                        sel += selectors(node, g, form)
            if not sel:
                sel = selectors(node, {"cls": node.get("cls"), "name": node["name"]}, form)
            if node["path"] not in done_controls:
                done_controls.add(node["path"])
                for ctl in result["controls"]:
                    if ctl["path"] == node["path"]:
                        sel += selectors(dict(node, param=""), ctl, form)
            rng.shuffle(sel)
            if form == "kw":
                # sympy's `-k` takes every name after ONE flag; the command's own `-k` before
                # this word is dropped and one `-k NAMES...` is placed where the first was.
                if args and args[-1] == "-k":
                    args.pop()
                if kw_at is None:
                    kw_at = len(args)
                kw_names += sel
                continue
            args.extend(sel)
        if kw_at is not None:
            rng.shuffle(kw_names)
            args[kw_at:kw_at] = ["-k"] + kw_names
        with open(args_file, "wb") as f:
            f.write(b"".join(a.encode("utf-8") + b"\0" for a in args))
    sys.stdout.write("\n" + PREFIX + " " + json.dumps(result, sort_keys=True) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
