"""tfpriv command line: `python train.py --model=... --dataset=... --aggregation=... --output_dir=DIR`.

`python train.py --help` describes the main job (what no flags run) and the flags.
"""
from tfpriv.cli.launch import entry_point

if __name__ == "__main__":
    entry_point()
