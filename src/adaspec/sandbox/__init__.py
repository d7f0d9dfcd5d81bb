"""Running untrusted, model-generated Python against its tests (MBPP pass@1): the code in a sandbox
(isolation.py starts child.py under bubblewrap, or under the weaker fallback it names), the verdict outside
it (checked_asserts.py compares what the sandbox reports with expected values it never sees)."""
