"""python/hvdrun/_lib.py against runtime/include/hvdrun/hvdrun_c.h: every function the
header declares has the same signature in _SIGNATURES (and no other is declared), every
enum value and #define constant has its Python twin with the same value, and Collective's
fields are hvdrun_collective's, in order and of the same types. The header is read as text,
so the check needs no compiler and no library; a change on one side only fails here."""
import ctypes
import os
import re

from hvdrun import _lib

HEADER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "runtime",
                      "include", "hvdrun", "hvdrun_c.h")

# C spellings (without const, spaces normalised) and the ctypes type _lib must use.
_SCALARS = {
    "int": ctypes.c_int,
    "size_t": ctypes.c_size_t,
    "long long": ctypes.c_longlong,
    "double": ctypes.c_double,
    "hvdrun_handle": ctypes.c_longlong,
    "hvdrun_dtype": ctypes.c_int,
    "hvdrun_op": ctypes.c_int,
    "char*": ctypes.c_char_p,
    "void*": ctypes.c_void_p,
    "int*": ctypes.POINTER(ctypes.c_int),
    "long long*": ctypes.POINTER(ctypes.c_longlong),
    "hvdrun_collective*": ctypes.POINTER(_lib.Collective),
    # A callback is passed as a plain pointer (a CFUNCTYPE object converts to it).
    "function pointer": ctypes.c_void_p,
}


def _header_text():
    with open(HEADER, encoding="utf-8") as f:
        text = f.read()
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    return re.sub(r"//[^\n]*", " ", text)


def _ctype(decl, named=True):
    """The ctypes type of a C declaration such as `const void* send` (named: a trailing
    parameter or field name is dropped) or a return type such as `const char*`."""
    decl = " ".join(decl.split())
    if "(*" in decl:
        return _SCALARS["function pointer"]
    decl = decl.replace("const ", "").replace(" *", "*")
    if named:
        decl = re.sub(r"\s*\b\w+$", "", decl)
    decl = decl.replace(" *", "*").strip()
    assert decl in _SCALARS, f"hvdrun_c.h uses C type '{decl}', which this test cannot map"
    return _SCALARS[decl]


def _split_params(params):
    out, depth, cur = [], 0, ""
    for c in params:
        if c == "," and depth == 0:
            out.append(cur)
            cur = ""
            continue
        depth += c == "("
        depth -= c == ")"
        cur += c
    out.append(cur)
    return [p.strip() for p in out if p.strip() and p.strip() != "void"]


def header_functions():
    """{name: (restype, [argtypes])} of every HVDRUN_C_API function in the header."""
    found = {}
    for ret, name, params in re.findall(r"HVDRUN_C_API\s+([^;(]*?)\s*\b(hvdrun_\w+)\((.*?)\);",
                                        _header_text(), flags=re.S):
        found[name] = (_ctype(ret, named=False), [_ctype(p) for p in _split_params(params)])
    return found


def header_constants():
    """{NAME: value} of the header's enum values and integer #defines, HVDRUN_ dropped."""
    text = _header_text()
    out = {}
    for body in re.findall(r"typedef enum \w+ \{(.*?)\}", text, flags=re.S):
        for name, value in re.findall(r"HVDRUN_(\w+)\s*=\s*(-?\d+)", body):
            out[name] = int(value)
    for name, value in re.findall(r"#define HVDRUN_(\w+)\s+\(?(-?\d+)\)?", text):
        out[name] = int(value)
    return out


def header_collective_fields():
    body = re.search(r"typedef struct hvdrun_collective \{(.*?)\} hvdrun_collective;",
                     _header_text(), flags=re.S).group(1)
    fields = [f.strip() for f in body.split(";") if f.strip()]
    return [(re.search(r"(\w+)$", f).group(1), _ctype(f)) for f in fields]


def test_every_function_has_the_headers_signature():
    header = header_functions()
    assert len(header) >= 40  # the parse found the header's functions
    python = {name: (restype, list(argtypes))
              for name, (restype, argtypes) in _lib._SIGNATURES.items()}
    assert sorted(set(header) - set(python)) == [], "declared in hvdrun_c.h, missing in _lib.py"
    assert sorted(set(python) - set(header)) == [], "declared in _lib.py, not in hvdrun_c.h"
    wrong = {name: {"hvdrun_c.h": header[name], "_lib.py": python[name]}
             for name in header if header[name] != python[name]}
    assert wrong == {}


def test_every_constant_has_the_headers_value():
    constants = header_constants()
    abi = constants.pop("ABI_VERSION")
    assert _lib.ABI_REQUIRED <= abi
    assert len(constants) >= 19  # dtypes, ops, kinds, the two duplicate answers
    missing = sorted(name for name in constants if not hasattr(_lib, name))
    assert missing == [], "constants of hvdrun_c.h without a twin in _lib.py"
    wrong = {name: (value, getattr(_lib, name))
             for name, value in constants.items() if getattr(_lib, name) != value}
    assert wrong == {}, "hvdrun_c.h value, _lib.py value"


def test_collective_has_the_headers_fields():
    assert header_collective_fields() == list(_lib.Collective._fields_)
