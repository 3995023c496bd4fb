"""Entry point of `train.py`: parse flags, read the job's settings, run it, report.

Bad input (a flag, a file, a shape) prints one line `error: --flag: <why>` on stderr and exits
with code 2; an output directory this run created is removed, so nothing half-written is left
behind. Library errors name library parameters; the job maps them to its flags
(`tfpriv.jobs.job.flag_message`). Ctrl-C stops with one line saying how to resume (exit 130).
`--help` lists tfpriv's flags (shared, then per job); `--helpfull` lists every flag.
"""
from __future__ import annotations

import contextlib
import datetime
import logging
import math
import os
import re
import shutil
import signal
import sys
import tempfile

import tensorflow as tf
from absl import app, flags

from tfpriv import families, tf_logs
from tfpriv.cli import audit as audit_job
from tfpriv.cli import tuning
from tfpriv.cli import flags as cli_flags
from tfpriv.cli.flags import FLAGS, flag_message, settings_from_flags, tfpriv_flag_modules
from tfpriv.errors import UsageError
from tfpriv.jobs import pipeline
from tfpriv.jobs.job import Job
from tfpriv.training import distribute


def jobs() -> list[Job]:
    """The registered families' jobs, each once, in registration order."""
    return list({id(family.job): family.job for family in families.families().values()}.values())


cli_flags.define_settings_flags(jobs())  # the built-in families' flags, before absl parses the command line

HELP_FLAGS = ("--help", "-help", "--helpshort", "-helpshort", "-?", "--help=true", "--helpshort=true")


def help_sections() -> dict[str, str]:
    """--help: the shared flags, then each family's own (a job's flags are defined in the module of its run())."""
    return {cli_flags.SHARED: "shared flags (every model)",
            "tfpriv.cli.audit": "--audit (sensitivity audit of the configured model instead of training)",
            "tfpriv.cli.tuning": "--tune (hyperparameter tuning: trials are normal runs; epsilon of the whole job)",
            **{job.module: f"--model={' | '.join(job.names)} ({job.summary})" for job in jobs()}}


def job_for(model: str) -> Job:
    """The job of the family registered as `--model`."""
    known = families.families()
    if model not in known:
        raise UsageError(f"--model: must be one of {', '.join(known)}, got {model!r}")
    return known[model].job


def default_output_dir(model: str, dataset: str) -> str:
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    return os.path.join("runs", f"{model}-{dataset.replace(':', '_')}-{stamp}")


def check_writable(output_dir: str) -> None:
    """Refuses an --output_dir that cannot be created or written, before any work is done."""
    path = os.path.abspath(output_dir)
    if os.path.exists(path) and not os.path.isdir(path):
        raise UsageError(f"--output_dir: {output_dir} exists and is not a directory")
    parent, missing = path, []
    while not os.path.exists(parent):
        missing.append(os.path.basename(parent))
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent):
        raise UsageError(f"--output_dir: cannot create {output_dir}: {parent} is not a directory")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise UsageError(f"--output_dir: cannot write to {parent} (permission denied)")
    name_max = os.pathconf(parent, "PC_NAME_MAX")
    too_long = [name for name in missing if len(os.fsencode(name)) > name_max]
    if too_long:
        raise UsageError(f"--output_dir: cannot create {output_dir}: a folder name longer than {name_max} bytes")
    probe_writing(output_dir, path, os.path.join(parent, missing[-1]) if missing else None)


def probe_writing(output_dir: str, path: str, top_created: str | None) -> None:
    """Creates the folder and a file in it, then removes both: permissions alone do not say
    (root passes every access check, yet cannot write to /proc or a read-only mount). Only the
    empty folders it created, from `path` up to `top_created`, are removed."""
    try:
        os.makedirs(path, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path, prefix=".write-probe-"):
            pass
    except OSError as exc:
        raise UsageError(f"--output_dir: cannot write to {output_dir} ({exc.strerror or exc})") from None
    finally:
        folder = path
        while top_created is not None and len(folder) >= len(top_created):
            with contextlib.suppress(OSError):
                os.rmdir(folder)
            folder = os.path.dirname(folder)


def model_line(model: str, dataset: str, flag_values: flags.FlagValues = FLAGS) -> str | None:
    """The run's first line when --model or --dataset took a default because flags replaced the
    main job (None when both were given, by flag or flag file)."""
    given_model, given_dataset = flag_values["model"].present, flag_values["dataset"].present
    if given_model and given_dataset:
        return None
    if given_model:
        return f"model {model} on {dataset}, because {dataset} is the default --dataset of --model={model}"
    defaults = "--model" if given_dataset else "--model and --dataset"
    return (f"model {model} on {dataset}, because flags other than --output_dir replace the main job "
            f"({MAIN_JOB}) with the defaults of {defaults} (--help)")


def prepare(argv=None):
    """(job, settings, output_dir) for the flags; raises UsageError for bad flags."""
    if argv is not None and len(argv) > 1:
        raise UsageError(f"unexpected positional arguments: {' '.join(argv[1:])}")
    job = job_for(FLAGS.model)
    if FLAGS.mode not in cli_flags.MODES:
        raise UsageError(f"--mode: must be one of {', '.join(cli_flags.MODES)}, got {FLAGS.mode!r}")
    settings = settings_from_flags(job, FLAGS, model=FLAGS.model)
    tuning.check_flags(FLAGS)
    if FLAGS.tune:
        job = tuning.as_tuning_job(job)
    if FLAGS.audit and FLAGS.mode != "train":
        raise UsageError(f"--audit: audits the model a training run would build; not with --mode={FLAGS.mode}")
    if FLAGS.mode == "sample":
        if job.sample is None:
            raise UsageError(f"--mode: sample is not supported for --model={FLAGS.model}; use --mode=train")
        if not FLAGS.output_dir:
            raise UsageError("--output_dir: --mode=sample needs the folder of a trained run")
        return job, settings, FLAGS.output_dir
    if FLAGS["output_dir"].present and not FLAGS.output_dir:
        raise UsageError("--output_dir: is empty (an unset shell variable?); give a folder, or leave the flag out "
                         "for the default runs/<model>-<dataset>-<time>")
    output_dir = FLAGS.output_dir or default_output_dir(FLAGS.model, settings.dataset)
    check_writable(output_dir)
    return job, settings, output_dir


def execute(job: Job, settings, output_dir: str) -> dict:
    if FLAGS.tune:
        return tuning.tune(job, settings, output_dir)
    if FLAGS.audit:
        return audit_job.audit(job, settings, output_dir, FLAGS.audit_batch_size)
    if FLAGS.mode == "sample":
        return job.sample(settings, output_dir)
    return job.run(settings, output_dir)


def epsilon_text(eps: float, delta: float, caveat: str | None, as_if_poisson: float | None = None) -> str:
    """`epsilon = E at delta = D`, with how it was accounted when that is not Poisson sampling (shuffled
    batches) and the as-if-Poisson figure labelled as such, on the same line."""
    text = f"epsilon = {eps:.4g} at delta = {delta:.3g}" + (f" [{caveat}]" if caveat else "")
    if as_if_poisson is not None:
        text += f" (as if the batches had been Poisson-sampled, which they were not: {as_if_poisson:.4g})"
    return text


def guarantee_text(entry: dict) -> str:
    """One artefact of results.json's `guarantees`: its epsilon and scope, or why it is not private."""
    if entry.get("epsilon") is None:
        return f"{entry['what']}: {entry['guarantee']}"
    epsilon = epsilon_text(entry["epsilon"], entry["delta"], entry.get("caveat"))
    return f"{entry['what']}: {epsilon}, {entry['guarantee']}"


def report(job: Job, output_dir: str, results: dict, mode: str = "train") -> None:
    """What a finished run prints: epsilon (or that there is none) with its caveat, or each released
    artefact's guarantee when the run releases artefacts under different ones; a budget stop; the metrics."""
    if mode == "sample":
        print(f"{results.get('num_samples')} samples written to {results.get('samples')}"
              + (f" (grid: {results['grid']})" if results.get("grid") else ""))
        return
    eps = results.get("epsilon")
    if results.get("guarantees"):
        print(f"released artefacts and their guarantees (results: {output_dir}/results.json):")
        for name, entry in results["guarantees"].items():
            print(f"  {name} {guarantee_text(entry)}")
    elif eps is None or (isinstance(eps, float) and math.isinf(eps)):
        print(f"non-private run: no privacy guarantee (epsilon = inf). Results: {output_dir}/results.json")
    else:
        print(f"{epsilon_text(eps, results.get('delta'), results.get('epsilon_caveat'), results.get('epsilon_as_if_poisson'))} "
              f"({results.get('aggregation')}, effective noise multiplier "
              f"{results.get('effective_noise_multiplier', float('nan')):.4g}, {results.get('steps')} steps). "
              f"Results: {output_dir}/results.json")
    if results.get("budget_reached"):
        print(f"stopped at --max_epsilon={results.get('max_epsilon'):g}: {results.get('epochs')} of "
              f"{results.get('planned_epochs')} planned epochs completed; the next step would exceed the budget")
    metrics = results.get("metrics", {})
    shown = {k: v for k, v in metrics.items() if isinstance(v, (int, float)) and not k.endswith("seconds")}
    if shown:
        print("metrics: " + ", ".join(f"{k}={v:.4g}" for k, v in sorted(shown.items())))


def start_strategy():
    """--strategy (after --num_cpu_devices splits the CPU): made before any other TensorFlow work."""
    if FLAGS.strategy != "default" and (FLAGS.audit or FLAGS.mode != "train"):
        raise UsageError(f"--strategy: only for training; --mode={FLAGS.mode}{' --audit' if FLAGS.audit else ''} "
                         "runs on one device")
    if FLAGS.num_cpu_devices is not None:
        distribute.split_cpu(FLAGS.num_cpu_devices)
    if FLAGS.strategy != "default":
        tf.get_logger().setLevel(logging.ERROR)  # tf.distribute's INFO and WARNING lines (devices, eager runs)
    return distribute.make_strategy(FLAGS.strategy)


def main(argv) -> None:
    family = families.families().get(FLAGS.model)
    job, output_dir, existed, chief = family and family.job, None, False, True
    # Explicit, so Ctrl-C works even where SIGINT was inherited as ignored (a background job).
    signal.signal(signal.SIGINT, pipeline.on_sigint)
    try:
        strategy = start_strategy()
        chief = distribute.is_chief(strategy)
        job, settings, output_dir = prepare(argv)
        line = model_line(FLAGS.model, settings.dataset) if chief and FLAGS.mode == "train" else None
        if line:
            print(line, flush=True)
        existed = os.path.exists(output_dir)
        # Another worker of a multi-worker run writes to a temporary folder (only the chief writes).
        with distribute.use_strategy(strategy), \
                distribute.worker_dir(output_dir, strategy, job.checkpoint_subdir) as write_dir:
            results = execute(job, settings, write_dir)
    except UsageError as exc:
        fail(flag_message(exc, job), output_dir if chief else None, existed, job)
    except KeyboardInterrupt:
        interrupted(job, output_dir)
    if not chief:
        print(f"worker finished; the chief writes the results to {output_dir}")
        return
    if FLAGS.tune:
        print(tuning.report(output_dir, results))
        return
    if FLAGS.audit:
        print(audit_job.report(output_dir, results))
        if not results["passed"]:
            sys.exit(1)
        return
    report(job, output_dir, results, FLAGS.mode)


def has_checkpoints(job: Job | None, output_dir: str | None) -> bool:
    checkpoints = os.path.join(output_dir, job.checkpoint_subdir) if output_dir and job else None
    return bool(checkpoints) and os.path.isdir(checkpoints) and bool(os.listdir(checkpoints))


def fail(message: str, output_dir: str | None, existed: bool, job: Job | None = None) -> None:
    """One line on stderr, exit code 2; removes the output folder if this run created it (and
    trained nothing into it yet)."""
    if output_dir and not existed and not has_checkpoints(job, output_dir):
        shutil.rmtree(output_dir, ignore_errors=True)
    print(f"error: {message}", file=sys.stderr)
    sys.exit(2)


def interrupted(job: Job | None, output_dir: str | None) -> None:
    """Ctrl-C: one line saying where the checkpoints are and how to resume; exit code 130."""
    if has_checkpoints(job, output_dir):
        checkpoints = os.path.join(output_dir, job.checkpoint_subdir)
        print(f"interrupted: checkpoints are in {checkpoints}; run the same command again "
              "(same --output_dir) to resume", file=sys.stderr)
    elif output_dir:
        print(f"interrupted before the first checkpoint in {output_dir}; run the same command again "
              "to start over", file=sys.stderr)
    else:
        print("interrupted", file=sys.stderr)
    sys.exit(130)


def help_text() -> str:
    """tfpriv's flags grouped by job (absl's and TensorFlow's are under --helpfull)."""
    parts = [HELP_HEADER, ""]
    cli_flags.define_settings_flags(jobs())  # families registered since start-up
    modules = tfpriv_flag_modules(FLAGS, jobs())
    sections = help_sections()
    for module in [m for m in sections if m in modules] + [m for m in modules if m not in sections]:
        rendered = FLAGS.module_help(module).strip("\n").splitlines()
        if rendered:
            parts.append(f"{sections.get(module, module)}:")
            parts.extend(rendered[1:])
            parts.append("")
    parts.append("Flag files: --flagfile=flags/NAME.cfg. Every flag, including absl's and TensorFlow's: --helpfull.")
    return "\n".join(parts)


MAIN_JOB_FLAGFILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "main_job.cfg")
MAIN_JOB = "a DP-SGD VAE on MNIST"  # what main_job.cfg trains, in the lines below

MAIN_JOB_DIR = os.path.join("runs", "main_job")  # the main job's folder without --output_dir: re-running resumes

HELP_HEADER = f"""usage: tfpriv [flags]   (from a clone: python train.py [flags])

With no flags (or only --output_dir and --audit flags) it runs the main job, {MAIN_JOB}:
{MAIN_JOB_FLAGFILE}
(--aggregation=micro, epsilon = 8 at delta = 1e-5, on the MNIST copy bundled with tfpriv, --seed=0 so
that two runs give the same result); it prints epsilon and the test log-likelihood and writes its run
folder ({MAIN_JOB_DIR} unless --output_dir is given; running it again resumes there).
Any other flag replaces the main job: unset flags take --model's defaults (--model=privae,
--dataset=digits), and the run's first line says so. To change the main job, start from its file:
python train.py --flagfile={MAIN_JOB_FLAGFILE} --epochs=10.
Experiments: --flagfile=flags/NAME.cfg."""


def with_main_job(argv: list[str]) -> list[str]:
    """No flags at all (or only --audit flags and --output_dir): the main job's flag file (a
    private VAE on the bundled MNIST) first, `--output_dir=runs/main_job` unless given (a stable
    folder, so that running it again resumes), and a line saying both."""
    if any(not a.startswith(("--audit", "--output_dir")) for a in argv[1:]):
        return argv
    given = any(a.startswith("--output_dir") for a in argv[1:])
    output_dir = [] if given else [f"--output_dir={MAIN_JOB_DIR}"]
    where = "" if given else f", writing to {MAIN_JOB_DIR} (running it again resumes there)"
    print(f"running the main job, {MAIN_JOB} ({MAIN_JOB_FLAGFILE}){where}; --help lists the flags", flush=True)
    return [argv[0], f"--flagfile={MAIN_JOB_FLAGFILE}", *output_dir, *argv[1:]]


def parse_flags(argv):
    argv = with_main_job(list(argv))
    args = argv[1:argv.index("--")] if "--" in argv else argv[1:]
    if any(a in HELP_FLAGS for a in args):
        print(help_text())
        sys.exit(0)
    try:
        remaining = command_line_flags()(argv)
    except flags.Error as exc:
        print(f"error: {parse_error_message(exc)}", file=sys.stderr)
        sys.exit(2)
    FLAGS.mark_as_parsed()
    return remaining


def command_line_flags() -> flags.FlagValues:
    """absl's FLAGS with tfpriv's flags added, each under the module that defined it: `app.run` parses
    the process's FLAGS (its --helpfull, --flagfile and logging flags), and the values land on the Flag
    objects tfpriv's FLAGS reads. Only the command line does this; the library leaves absl's FLAGS alone."""
    cli_flags.define_settings_flags(jobs())  # families registered since start-up
    process = flags.FLAGS
    for module, defined in FLAGS.flags_by_module_dict().items():
        for flag in defined:
            if flag.name not in process or process[flag.name] is not flag:
                process[flag.name] = flag
                process.register_flag_by_module(module, flag)
    return process


_ILLEGAL_VALUE = re.compile(r"^flag --(\w+)=(.*?): (.*)$")
_CANT_OPEN = re.compile(r"\[Errno \d+\] (.*?): (.*)$")  # absl: "ERROR:: Unable to open flagfile: [Errno 2] ..."


def parse_error_message(exc: flags.Error) -> str:
    """absl's parse errors in the `--flag: why` form of every other error (one line)."""
    if isinstance(exc, flags.UnrecognizedFlagError):
        return f"--{exc.flagname}: unknown flag (--help lists the flags)"
    if isinstance(exc, flags.CantOpenFlagFileError):
        match = _CANT_OPEN.search(str(exc))
        why = f"cannot open {match.group(2)} ({match.group(1)})" if match else str(exc).split("flagfile: ", 1)[-1]
        return f"--flagfile: {why}"
    lines = str(exc).strip().splitlines()
    message = lines[0] if lines else "invalid flags"
    match = _ILLEGAL_VALUE.match(message)
    return f"--{match.group(1)}: invalid value {match.group(2)!r} ({match.group(3)})" if match else message


def process_main(argv) -> None:
    """`main` as a process's own: TensorFlow's Python log lines follow TF_CPP_MIN_LOG_LEVEL (3 unless
    set) too, unless --verbosity is given, so an error or an interruption stays one stderr line."""
    if not flags.FLAGS["verbosity"].present:
        tf_logs.quiet_python_logs()
    main(argv)


def entry_point() -> None:
    """Parses the flags and runs `main` (called by `tfpriv.cli.launch.entry_point`, after its Ctrl-C handler)."""
    app.run(process_main, flags_parser=parse_flags)
