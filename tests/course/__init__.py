"""The course's tests (edit_course): its claims, exercises, panels and lessons, apart from the library's tests in
tests/unit and tests/distributed, which never import edit_course (tests/unit/test_tests_apart.py)."""
