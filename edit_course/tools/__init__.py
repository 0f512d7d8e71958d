"""The course's tools: make notebooks, solutions mode, slides, the capstone's mysteries, the static site."""
