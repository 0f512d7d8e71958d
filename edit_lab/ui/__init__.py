"""Layer 7, the widgets (ipywidgets appears only here): `lab.StragglerLab`, the panel that runs real training
from a notebook, and `preview`, its instant preview."""
