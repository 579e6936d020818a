"""Strip volatile metadata from executed notebooks (papermill timings, kernel versions)
so a committed notebook changes only when its content or outputs do."""

import json
import sys


def strip(path: str) -> None:
    with open(path) as f:
        nb = json.load(f)
    nb.get("metadata", {}).pop("papermill", None)
    nb.get("metadata", {}).get("language_info", {}).pop("version", None)
    for cell in nb.get("cells", []):
        cell.get("metadata", {}).pop("papermill", None)
        cell.get("metadata", {}).pop("execution", None)
    with open(path, "w") as f:
        json.dump(nb, f, indent=1, ensure_ascii=False)
        f.write("\n")


if __name__ == "__main__":
    for p in sys.argv[1:]:
        strip(p)
