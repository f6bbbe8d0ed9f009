"""Binary-tree inorder traversal [paper: tree traversal]: recursion, explicit stack, Morris."""

from __future__ import annotations

import ast

from icml26.algosteer.astq import Program
from icml26.algosteer.tasks.base import Case, Task

PROMPT = (
    "Write a Python function `inorder(root)` that returns a list of the values of a binary tree "
    "in inorder (left subtree, node, right subtree). Each node has attributes `val`, `left` and "
    "`right` (children are None when absent); `root` may be None."
)

HARNESS = """
class TreeNode:
    def __init__(self, val=0, left=None, right=None):
        self.val, self.left, self.right = val, left, right

def _tree(values):
    # level-order list with None holes -> TreeNode (LeetCode convention)
    if not values:
        return None
    nodes = [None if v is None else TreeNode(v) for v in values]
    kids = nodes[::-1]
    root = kids.pop()
    for node in nodes:
        if node is not None:
            if kids:
                node.left = kids.pop()
            if kids:
                node.right = kids.pop()
    return root

def _ref(root):
    out, stack, cur = [], [], root
    while stack or cur is not None:
        while cur is not None:
            stack.append(cur)
            cur = cur.left
        cur = stack.pop()
        out.append(cur.val)
        cur = cur.right
    return out

def _chain(n, side):
    root = None
    for v in range(n):
        root = TreeNode(v, root, None) if side == "left" else TreeNode(n - v, None, root)
    return root
"""

_TREES = (
    "[]",
    "[1]",
    "[1, None, 2, 3]",
    "[4, 2, 6, 1, 3, 5, 7]",
    "[5, 3, 8, 1, 4, None, 9, None, 2]",
    "[10, 5, 15, None, 7, 12]",
)


def stack_shape(p: Program) -> bool:
    """A list used as a stack: ``.append`` plus ``.pop()`` inside a ``while`` loop."""
    for loop in p.nodes(ast.While):
        methods = {
            n.func.attr
            for n in ast.walk(loop)
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
        }
        if "pop" in methods and ("append" in methods or "extend" in methods):
            return True
    return False


def rules(p: Program) -> tuple[str, str] | None:
    if p.attribute_stores("right") and p.has_while() and not p.recursive_functions():
        return "morris", "threads .right pointers in a loop"
    rec = p.recursive_functions()
    if rec:
        return "recursive", f"self-call {sorted(rec)[0]!r}"
    if any(isinstance(n, ast.YieldFrom) for n in p.nodes(ast.YieldFrom)):
        return "recursive", "yield from"
    if stack_shape(p):
        return "stack", "append/pop in a while loop"
    if p.method_calls("popleft") or p.calls("deque") and p.has_while():
        return "stack", "deque used as a stack"
    return None


REFERENCES = {
    "recursive": (
        "def inorder(root):\n    if root is None:\n        return []\n"
        "    return inorder(root.left) + [root.val] + inorder(root.right)\n",
        "def inorder(root):\n    out = []\n    def walk(node):\n        if node:\n"
        "            walk(node.left)\n            out.append(node.val)\n            walk(node.right)\n"
        "    walk(root)\n    return out\n",
    ),
    "stack": (
        "def inorder(root):\n    out, stack, node = [], [], root\n    while stack or node:\n"
        "        while node:\n            stack.append(node)\n            node = node.left\n"
        "        node = stack.pop()\n        out.append(node.val)\n        node = node.right\n"
        "    return out\n",
    ),
    "morris": (
        "def inorder(root):\n    out, cur = [], root\n    while cur:\n        if cur.left is None:\n"
        "            out.append(cur.val)\n            cur = cur.right\n        else:\n"
        "            pre = cur.left\n            while pre.right and pre.right is not cur:\n"
        "                pre = pre.right\n            if pre.right is None:\n"
        "                pre.right = cur\n                cur = cur.left\n            else:\n"
        "                pre.right = None\n                out.append(cur.val)\n"
        "                cur = cur.right\n    return out\n",
    ),
}

TASK = Task(
    name="tree",
    title="Binary-tree inorder traversal",
    prompt=PROMPT,
    entry="inorder",
    harness=HARNESS,
    functional=tuple(Case(f"inorder(_tree({t}))", f"_ref(_tree({t}))") for t in _TREES),
    large=(
        Case("inorder(_chain(100000, 'left'))", "list(range(100000))"),
        Case("inorder(_chain(100000, 'right'))", "list(range(1, 100001))"),
    ),
    families=("recursive", "stack", "morris"),
    rules=rules,
    references=REFERENCES,
    named=("stack", "an iterative traversal with an explicit stack (no recursion)"),
    source="paper",
)
