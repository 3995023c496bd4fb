"""tfpriv: differentially private generative modelling in TensorFlow/Keras."""

__version__ = "0.1.0"
