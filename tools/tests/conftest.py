"""The tools' tests share tests/utils (script_module, cuda_tools) with the library's tests."""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "tests"))
