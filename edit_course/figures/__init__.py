"""The notebooks' own figures, from numbers they computed: the method's arithmetic (concepts), 04's sync split
(prefetch), sweeps, 05's detector playground and 09's race."""
