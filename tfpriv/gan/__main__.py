"""`python -m tfpriv.gan ...` is `python train.py ...` (the GAN flags are defined by tfpriv.gan.cli)."""
from tfpriv.cli.launch import entry_point

if __name__ == "__main__":
    entry_point()
