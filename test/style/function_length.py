"""No function in lib/ or bindings/ longer than LIMIT lines (issue 83's house rule): a longer one is a sign that a
part of it wants a name. Lengths as lizard (PyPI, the code-complexity analyser) counts them, from the line of the
signature to the closing brace; C++ sources and headers and the CUDA files. Fails listing every offender.

    python test/style/function_length.py SOURCE_DIR [--limit 80]
"""
import argparse
import pathlib
import sys

import lizard

SUFFIXES = {".cpp", ".hpp", ".cu", ".cuh", ".inl", ".h"}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("source_dir")
    parser.add_argument("--limit", type=int, default=80)
    args = parser.parse_args()
    root = pathlib.Path(args.source_dir)
    files = sorted(p for folder in ("lib", "bindings") for p in (root / folder).rglob("*") if p.suffix in SUFFIXES)
    if not files:
        sys.exit(f"function_length: no sources under {root}/lib or {root}/bindings")
    long = []
    functions = 0
    for path in files:
        for f in lizard.analyze_file(str(path)).function_list:
            functions += 1
            if f.length > args.limit:
                long.append(f"{path.relative_to(root)}:{f.start_line}: {f.name}: {f.length} lines")
    print(f"function_length: {functions} functions in {len(files)} files, limit {args.limit} lines")
    if long:
        print("longer than the limit:\n  " + "\n  ".join(long))
        sys.exit(1)


if __name__ == "__main__":
    main()
