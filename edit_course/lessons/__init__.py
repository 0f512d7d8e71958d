"""Helpers of one notebook each: 04 (sync timing), 05 (the penalty's figures and tables), 06 (the races), 08 (the capstone)."""
