"""Helpers of one notebook each: 04 (sync timing), 06 (the races), 08 (the capstone)."""
