"""Install snpu as soon as this directory's tests are collected.

It must happen before ``torch.testing._internal`` is imported, or device-generic tests
get no snpu classes; when another test module of the same worker imported it first,
``register_test_base`` adds snpu to the already computed device list. The OpInfo test
module also fails outright if it instantiated no snpu test.
"""

from __future__ import annotations

import runners.snpu
from runners.snpu.testing_hook import register_test_base

runners.snpu.install()
register_test_base()
