"""LRU cache [paper: LRU cache]: ``OrderedDict``, plain-dict reinsertion order, a hash map plus a
doubly linked list, a list of keys in recency order."""

from __future__ import annotations

import ast

from icml26.algosteer.astq import Program
from icml26.algosteer.tasks.base import Case, Task

PROMPT = (
    "Write a Python class `LRUCache` with `__init__(self, capacity)`, `get(self, key)` that "
    "returns the value stored for `key` or -1 if it is absent, and `put(self, key, value)` that "
    "stores the value; when the cache holds more than `capacity` keys, the least recently used "
    "key (by `get` or `put`) is evicted."
)

HARNESS = """
class _Ref:
    def __init__(self, capacity):
        self.capacity, self.d = capacity, {}
    def get(self, key):
        if key not in self.d:
            return -1
        self.d[key] = self.d.pop(key)
        return self.d[key]
    def put(self, key, value):
        self.d.pop(key, None)
        self.d[key] = value
        if len(self.d) > self.capacity:
            del self.d[next(iter(self.d))]

def _replay(cls, capacity, ops):
    cache, out = cls(capacity), []
    for op in ops:
        if op[0] == "get":
            out.append(cache.get(op[1]))
        else:
            out.append(cache.put(op[1], op[2]))
    return [x for x in out]

def _ops(n, keys, seed=1):
    ops, x = [], seed
    for i in range(n):
        x = (x * 1103515245 + 12345) % 2147483648
        k = x % keys
        ops.append(("put", k, i) if x % 3 == 0 else ("get", k))
    return ops

def _same(cls, capacity, ops):
    got = [v for op, v in zip(ops, _replay(cls, capacity, ops)) if op[0] == "get"]
    want = [v for op, v in zip(ops, _replay(_Ref, capacity, ops)) if op[0] == "get"]
    return got == want
"""

_SEQ = (
    "[('put', 1, 1), ('put', 2, 2), ('get', 1), ('put', 3, 3), ('get', 2), ('put', 4, 4), "
    "('get', 1), ('get', 3), ('get', 4)]"
)
_CASES = (
    f"_same(LRUCache, 2, {_SEQ})",
    "_same(LRUCache, 1, [('put', 1, 1), ('put', 1, 5), ('get', 1), ('put', 2, 2), ('get', 1), "
    "('get', 2)])",
    "_same(LRUCache, 2, [('put', 2, 1), ('put', 1, 1), ('put', 2, 3), ('put', 4, 1), ('get', 1), "
    "('get', 2)])",
    "_same(LRUCache, 3, _ops(300, 6))",
    "_same(LRUCache, 5, _ops(400, 12, seed=7))",
)


def linked_nodes(p: Program) -> bool:
    """Stores into ``.prev`` and ``.next`` attributes (a doubly linked list)."""
    return (p.attribute_stores("prev") or p.attribute_stores("left")) and (
        p.attribute_stores("next") or p.attribute_stores("right")
    ) > 0


def rules(p: Program) -> tuple[str, str] | None:
    if p.calls("OrderedDict") or p.method_calls("move_to_end"):
        return "ordered_dict", "collections.OrderedDict"
    if linked_nodes(p):
        return "linked_list", "dict + doubly linked nodes (.prev/.next)"
    list_ops = p.method_calls("remove", "insert") + [
        c
        for c in p.method_calls("pop")
        if c.args and isinstance(c.args[0], ast.Constant) and c.args[0].value == 0
    ]
    if list_ops or p.method_calls("index"):
        return "list_order", "recency list (remove/insert/pop(0))"
    if p.calls("iter") or p.method_calls("pop") or p.calls("min"):
        return "dict_order", "dict re-insertion order / timestamps"
    return None


REFERENCES = {
    "ordered_dict": (
        "from collections import OrderedDict\n\nclass LRUCache:\n"
        "    def __init__(self, capacity):\n        self.capacity = capacity\n"
        "        self.data = OrderedDict()\n    def get(self, key):\n"
        "        if key not in self.data:\n            return -1\n"
        "        self.data.move_to_end(key)\n        return self.data[key]\n"
        "    def put(self, key, value):\n        self.data[key] = value\n"
        "        self.data.move_to_end(key)\n        if len(self.data) > self.capacity:\n"
        "            self.data.popitem(last=False)\n",
    ),
    "dict_order": (
        "class LRUCache:\n    def __init__(self, capacity):\n        self.capacity = capacity\n"
        "        self.data = {}\n    def get(self, key):\n        if key not in self.data:\n"
        "            return -1\n        value = self.data.pop(key)\n        self.data[key] = value\n"
        "        return value\n    def put(self, key, value):\n        self.data.pop(key, None)\n"
        "        self.data[key] = value\n        if len(self.data) > self.capacity:\n"
        "            del self.data[next(iter(self.data))]\n",
    ),
    "linked_list": (
        "class Node:\n    def __init__(self, key=None, value=None):\n"
        "        self.key, self.value = key, value\n        self.prev = self.next = None\n\n"
        "class LRUCache:\n    def __init__(self, capacity):\n        self.capacity = capacity\n"
        "        self.map = {}\n        self.head, self.tail = Node(), Node()\n"
        "        self.head.next, self.tail.prev = self.tail, self.head\n"
        "    def _unlink(self, node):\n        node.prev.next, node.next.prev = node.next, node.prev\n"
        "    def _push(self, node):\n        node.prev, node.next = self.tail.prev, self.tail\n"
        "        self.tail.prev.next = node\n        self.tail.prev = node\n"
        "    def get(self, key):\n        node = self.map.get(key)\n        if node is None:\n"
        "            return -1\n        self._unlink(node)\n        self._push(node)\n"
        "        return node.value\n    def put(self, key, value):\n        node = self.map.get(key)\n"
        "        if node is not None:\n            node.value = value\n            self._unlink(node)\n"
        "        else:\n            node = Node(key, value)\n            self.map[key] = node\n"
        "        self._push(node)\n        if len(self.map) > self.capacity:\n"
        "            old = self.head.next\n            self._unlink(old)\n"
        "            del self.map[old.key]\n",
    ),
    "list_order": (
        "class LRUCache:\n    def __init__(self, capacity):\n        self.capacity = capacity\n"
        "        self.data = {}\n        self.order = []\n    def get(self, key):\n"
        "        if key not in self.data:\n            return -1\n        self.order.remove(key)\n"
        "        self.order.append(key)\n        return self.data[key]\n"
        "    def put(self, key, value):\n        if key in self.data:\n"
        "            self.order.remove(key)\n        self.data[key] = value\n"
        "        self.order.append(key)\n        if len(self.data) > self.capacity:\n"
        "            del self.data[self.order.pop(0)]\n",
    ),
}

TASK = Task(
    name="lru",
    title="LRU cache",
    prompt=PROMPT,
    entry="LRUCache",
    harness=HARNESS,
    functional=tuple(Case(c, "True") for c in _CASES),
    large=(Case("_same(LRUCache, 20000, _ops(200000, 40000))", "True"),),
    families=("ordered_dict", "dict_order", "linked_list", "list_order"),
    rules=rules,
    references=REFERENCES,
    named=("ordered_dict", "collections.OrderedDict"),
    entry_is_class=True,
    source="paper",
)
