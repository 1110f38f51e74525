"""The training loop: wires config, data, model, optimiser, checkpoints and logging (TBPTT).

`Trainer(cfg).run()` trains until `train.epochs` / `train.max_steps` are done or a stop
signal arrives, resuming from the newest complete checkpoint of `train.output_dir`.
"""

from __future__ import annotations

import logging
import math
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch
from tqdm.auto import tqdm
from tqdm.contrib.logging import logging_redirect_tqdm

from hornn_dist import __version__
from hornn_dist.config import RunConfig, tomllib
from hornn_dist.data.progress import on_terminal
from hornn_dist.data.shards import TokenReader
from hornn_dist.data.streams import TBPTTStream, check_layout
from hornn_dist.models import build_model, plan_for
from hornn_dist.models import init as init_rule
from hornn_dist.models.output_layer import DEFAULT_CUTOFF_COVERAGE, coverage_cutoffs
from hornn_dist.models.precision import resolve_mixed_precision
from hornn_dist.run import checkpoint as ckpt
from hornn_dist.run.checkpointer import Checkpointer
from hornn_dist.run.loading import evaluation_model, load_model, open_prepared_corpus
from hornn_dist.run.lock import RunLock
from hornn_dist.run.resume import start_run, take_run_folder
from hornn_dist.run.run_layout import CONFIG_FILE, EVENTS_FILE, RUN_LOG, TENSORBOARD
from hornn_dist.run.run_state import TrainerState
from hornn_dist.runtime import (
    StopFlag,
    build_accelerator,
    collective_failure,
    describe_hardware,
    launch_warning,
    set_cpu_threads,
    setup_logging,
)
from hornn_dist.training import dashboard, trackers
from hornn_dist.training.cadence import STOP_TIMED_STEPS, STOP_WARMUP_STEPS, Cadence
from hornn_dist.training.events import EventLog
from hornn_dist.training.memory import check_fits
from hornn_dist.training.metrics import RunningLoss, Throughput, perplexity
from hornn_dist.training.optim import build_optimization
from hornn_dist.training.run_log import RunLog
from hornn_dist.training.scoring import EvalResult, score_split, split_stream
from hornn_dist.training.step_setup import step_for_accelerator, uses_fused_sgd
from hornn_dist.util.errors import HornnError
from hornn_dist.util.files import write_text
from hornn_dist.util.provenance import UNKNOWN, code_commit, describe_commit
from hornn_dist.util.wording import counted, fmt_duration

logger = logging.getLogger("hornn_dist.train")
# the loop's bar where the stopping rule may end the run before its total
AT_MOST_BAR = (
    "{l_bar}{bar}| {n_fmt}/{total_fmt} steps at most [{elapsed}<{remaining}, {rate_fmt}{postfix}]"
)


def with_coverage_cutoffs(cfg: RunConfig, train: TokenReader, vocab_size: int) -> RunConfig:
    """Return `cfg` with `model.adaptive_cutoffs = []` resolved from the training split's
    counts (`coverage_cutoffs`), so that the run's config.toml and checkpoints name them."""
    cutoffs = coverage_cutoffs(train.id_counts(vocab_size).tolist())
    shares = " and ".join(f"{share:.0%}" for share in DEFAULT_CUTOFF_COVERAGE)
    logger.info(
        "model.adaptive_cutoffs = %s: where the most frequent words cover %s of the %s "
        "training tokens",
        cutoffs,
        shares,
        f"{len(train):,}",
    )
    return replace(cfg, model=replace(cfg.model, adaptive_cutoffs=cutoffs))


class NonFiniteLossError(HornnError):
    """The training loss became NaN or infinite."""


class Trainer:
    """Wires config, data, model, optimiser, checkpoints and logging into the TBPTT loop."""

    def __init__(self, cfg: RunConfig, stop: StopFlag | None = None) -> None:
        self.cfg = cfg
        self.stop = stop or StopFlag()
        self.out = Path(cfg.train.output_dir)
        self.trackers = cfg.log.tracker_names()
        built = trackers.build_trackers(
            self.trackers, self.out, self.stop.event
        )  # one not installed: one line
        # the run's first line says where it is (rank 0 by the launcher's RANK: the
        # Accelerator, which says it again, may wait for the other processes first)
        setup_logging(os.environ.get("RANK", "0") == "0")
        logger.info(
            "run folder %s: checkpoints/, config.toml, %slog %s, events %s",
            self.out,
            f"{TENSORBOARD}/, " if "tensorboard" in self.trackers else "",
            RUN_LOG,
            EVENTS_FILE,
        )
        self.precision = resolve_mixed_precision(cfg.train.mixed_precision, cfg.model.arch)
        self.accelerator = build_accelerator(
            self.precision.name, self.out, built, cfg.train.collective_timeout, say_launch=False
        )
        acc = self.accelerator
        setup_logging(acc.is_main_process)
        rank, world = acc.process_index, acc.num_processes
        train = cfg.train  # streams per process, checked before anything is sized from them
        check_layout(train.batch_size, train.bptt, rank, world, "train.batch_size", "train.bptt")
        self.batch_per_process = train.batch_size // world
        self.threads = set_cpu_threads(cfg.train.cpu_threads, acc.device)  # before any torch work
        self.run_log = RunLog(acc.is_main_process)  # output_dir/train.log, from _run on
        self.events = EventLog(acc.is_main_process)  # output_dir/metrics.jsonl, from _run on
        if launch_warning(acc):  # in train.log too: one process where two were meant
            logger.warning("%s", launch_warning(acc))
        from accelerate.utils import set_seed

        set_seed(cfg.train.seed)
        self.progress = TrainerState()  # what the loop has done; saved in every checkpoint
        self._loop_started: float | None = None  # perf_counter at the training loop's start
        self.speed = Throughput()  # tokens/s of the log lines, in training time only
        self.window = RunningLoss()  # the train loss since the last log line, kept by checkpoints
        self._train_spike_warned = False  # the first train window above the vocabulary
        self.epoch_loss = RunningLoss()  # the train loss of the epoch so far, kept likewise
        self.lines: dashboard.Lines | None = None  # TensorBoard's series told apart, main process
        self.bar: Any = None  # the loop's progress bar, while the loop runs
        self.phase = "preparing or checking the corpus (prepare it first: python -m hornn_dist.prepare CONFIG)"
        cfg.data.check_heldout()  # a run validates and tests: refused before preparing
        with self._collectives():
            self.corpus = open_prepared_corpus(cfg.data, acc, progress=cfg.log.prepare_progress())
        if cfg.model.output_layer == "adaptive" and not cfg.model.adaptive_cutoffs:
            cfg = self.cfg = with_coverage_cutoffs(
                cfg, self.corpus.split("train"), self.corpus.vocab_size
            )
        batch = self.batch_per_process
        check_fits(cfg.model, self.corpus.vocab_size, acc.device, batch, cfg.train.bptt)
        plan = plan_for(cfg.model, acc.device, batch, acc.mixed_precision)
        # No DDP, so the model is not Accelerate's: placed here, the step averages the flat
        # gradients itself (training/exchange.py, CUDA graphs) and autocasts the forward.
        self.core = build_model(cfg.model, self.corpus.vocab_size, plan).to(acc.device)
        self.fused_sgd = uses_fused_sgd(acc.mixed_precision, acc.device)
        # the schedule owns the lr: every change of it is set on the optimizer at once
        optimizer, self.schedule = build_optimization(self.core, cfg.optim, self.fused_sgd)
        self.optimizer = acc.prepare_optimizer(optimizer)
        self.hardware = describe_hardware(acc.device, world)  # for the trainer state
        # Streams are NOT passed through accelerator.prepare: each rank slices its own streams.
        self.train_stream = TBPTTStream(
            self.corpus.split("train"), cfg.train.batch_size, cfg.train.bptt, rank, world
        )
        for split in ("valid", "test"):  # a missing or too short split fails now, not later
            split_stream(self.corpus, split, acc, cfg.train.eval_batch_size, cfg.train.bptt)
        self.lock = RunLock(self.out)
        self.cadence = Cadence.from_config(cfg, world, self.train_stream.steps_per_epoch)
        self.step = step_for_accelerator(
            cfg, acc, self.core, self.optimizer, self.batch_per_process
        )
        # every part that survives a restart, saved and restored together
        self.checkpointer = Checkpointer(
            accelerator=acc,
            cfg=cfg,
            corpus=self.corpus,
            out=self.out,
            model=self.core,
            optimizer=self.optimizer,
            fused_sgd=self.fused_sgd,
            shared={"schedule": self.schedule},
            per_rank={
                "stream": self.train_stream,
                "step": self.step,
                "loss_window": self.window,
                "epoch_loss": self.epoch_loss,
            },
        )

    # ------------------------------------------------------------------ set-up

    def run(self, resume_from: str | None = None, fresh: bool = False) -> EvalResult | None:
        """Train until epochs/max_steps are done or a stop signal arrives; return the test result."""
        take_run_folder(self.accelerator, self.lock, self.out)
        try:
            with self._collectives():
                return self._run(resume_from, fresh)
        except KeyboardInterrupt:  # Ctrl-C where train.main's StopFlag is not installed
            interrupted = KeyboardInterrupt(self._last_checkpoint_line())
            self.run_log.failed(interrupted)
            raise interrupted from None
        except BaseException as err:
            self.run_log.failed(err)
            raise
        finally:
            if self.lines is not None:
                self.lines.close()
            self.run_log.close()
            self.events.close()
            self.lock.release()

    def _last_checkpoint_line(self) -> str:
        """Say which checkpoint a run interrupted now resumes from."""
        complete = ckpt.list_checkpoints(self.out)
        if not complete:
            return "no checkpoint was written yet: running again starts over"
        return f"the last complete checkpoint is {complete[-1]}: running again resumes from it"

    @contextmanager
    def _collectives(self) -> Iterator[None]:
        """Turn a collective that failed or timed out (a stalled or dead peer) into one line."""
        try:
            yield
        except RuntimeError as err:
            step = self.progress.step
            doing = f"{self.phase} at step {step}" if step else self.phase
            failure = collective_failure(err, doing, self.cfg.train.collective_timeout)
            if failure is None:
                raise
            raise failure from None

    def _run(self, resume_from: str | None, fresh: bool) -> EvalResult | None:
        acc = self.accelerator
        self.phase = "resuming"
        start = start_run(self.checkpointer, resume_from, fresh)
        if start.result is not None:  # a finished run: nothing to train, nothing to write
            return start.result
        self.progress, resumed = start.state, start.folder
        acc.wait_for_everyone()
        if acc.is_main_process:
            self.out.mkdir(parents=True, exist_ok=True)
            write_text(self.out / CONFIG_FILE, self.cfg.to_toml())  # atomic, never a link
        started = f"resumed from {resumed}" if resumed is not None else "fresh run"
        self.run_log.open(self.out, started)
        self.events.open(self.out)
        logger.info("run folder %s (%s)", self.out, started)
        self._start_trackers(resumed is not None)
        self._log_start(started)
        self.phase = "training"
        stopped = self._stopped_before_training() or self._loop()
        if not stopped:  # a signal's stop was recorded before its checkpoint
            self._record_stop(by_signal=False)
        result = None if stopped else self._finish()
        logger.info("training ended at step %d: %s", self.progress.step, self.progress.stop_reason)
        self.stop.training_ended()  # a signal from here on ends no more than a wait
        acc.end_training()
        return result

    def _stopped_before_training(self) -> bool:
        """Return whether a stop signal came during start-up (a slow tracker, a long resume):
        then no step is trained, and there is nothing new to save."""
        if not self._stop_requested():
            return False
        logger.info(
            "%s received before step %d: no step trained, nothing new to save",
            self.stop.signal_name,
            self.progress.step + 1,
        )
        self._record_stop(by_signal=True)
        return True

    def _finish(self) -> EvalResult:
        """Validate the last step unless that was just done (a run stopped by train.max_steps
        mid-epoch), score the test split on the best checkpoint by validation and on the last
        weights, and write the final checkpoint holding both."""
        if self.progress.last_valid_step != self.progress.step:
            self._validate()
        progress = self.progress
        last = self._evaluate("test")
        best = progress.best_checkpoint or ckpt.step_dir_name(progress.step)
        with self._doing(f"evaluating the test split on {best}"):
            result = self._score_test_on(best)
        best_step = int(best.removeprefix("step_"))  # the weights scored: a point at their step
        self._track({"test/loss": result.loss, "test/ppl": result.ppl}, step=best_step)
        self._track({"test/loss_last": last.loss, "test/ppl_last": last.ppl})
        self._draw({"test": result.loss}, step=best_step)
        logger.info(
            "test: %s predicted tokens (the split's %s but the first), loss %.4f, ppl %.2f on "
            "the best checkpoint by validation (%s); the last weights (step %d): loss %.4f, "
            "ppl %.2f",
            f"{result.tokens:,}",
            f"{len(self.corpus.split('test')):,}",
            result.loss,
            result.ppl,
            best,
            progress.step,
            last.loss,
            last.ppl,
        )
        progress.test, progress.test_checkpoint = result.record(), best
        writer = self._tensorboard_writer()
        if writer is not None:
            valid_ppl = perplexity(progress.best_valid, 1)
            table = dashboard.test_table(best, valid_ppl, result, last, progress.step)
            dashboard.record_test(writer, table, progress.step)
        self.events.write(
            "test",
            step=progress.step,
            checkpoint=best,
            loss=result.loss,
            ppl=result.ppl,
            tokens=result.tokens,
            last_loss=last.loss,
            last_ppl=last.ppl,
        )
        progress.test_last = last.record()
        # the loss was checked at this step's validation or save; a step saved already is
        # saved again only to hold its test score, which its line says
        saved_before = (ckpt.checkpoint_root(self.out) / ckpt.step_dir_name(progress.step)).is_dir()
        self._write_checkpoint(
            saved="recorded the test score in checkpoint" if saved_before else "saved checkpoint"
        )
        return result

    def _score_test_on(self, name: str) -> EvalResult:
        """Return the test result of checkpoint `name`'s weights (this step's: the weights in
        memory, saved next) computed as `python -m hornn_dist.evaluate` computes it."""
        acc, cfg = self.accelerator, self.cfg
        if name == ckpt.step_dir_name(self.progress.step):
            model = evaluation_model(
                cfg, self.corpus.vocab_size, acc.device, self.core.state_dict()
            )
        else:  # pruning keeps the best checkpoint
            folder = ckpt.checkpoint_root(self.out) / name
            model = load_model(folder, cfg, self.corpus, acc.device)
        return self._score(model, "test")

    def _start_trackers(self, resumed: bool) -> None:
        if not self.trackers:
            return
        # each run start writes TensorBoard's events into a folder of its own; a resume goes
        # on in its run's (kept in the trainer state), from the step after its checkpoint
        board = self.out / TENSORBOARD
        started = "tensorboard" in self.trackers and not self.progress.tensorboard_run
        if started:
            self.progress.tensorboard_run = dashboard.new_event_folder(board)
        go_on = resumed and not started
        kwargs = {"tensorboard": {"purge_step": self.progress.step + 1}} if go_on else {}
        # no config= here: Accelerate would put the hyper-parameters in a second, timestamped run
        project = f"{TENSORBOARD}/{self.progress.tensorboard_run}"  # TensorBoard's folder alone
        self.accelerator.init_trackers(project, init_kwargs=kwargs)
        if not self.accelerator.is_main_process:
            return
        # the other trackers start a run of their own each time: each gets the hyper-parameters
        trackers.describe_run(self.accelerator.trackers, self.cfg.flat())
        if "tensorboard" in self.trackers:
            folder = board / self.progress.tensorboard_run
            self.lines = dashboard.Lines(folder, self.progress.step + 1 if go_on else None)
        if started:  # once per run start, in its own folder
            writer = self.accelerator.get_tracker("tensorboard", unwrap=True)
            dashboard.describe_run(writer, self.cfg.flat(), self.core.feedback_path_slices())

    def _log_start(self, started: str) -> None:
        cfg, acc, corpus = self.cfg, self.accelerator, self.corpus
        world = acc.num_processes
        sizes = ", ".join(f"{s} {len(corpus.split(s)):,}" for s in corpus.splits)
        logger.info(
            "%s, %s parameters, vocabulary %d | tokens/step %d = %s x bptt %d "
            "(%d per process x %s) | %d steps/epoch, %s%s | tokens: %s | device %s, %s, step %s",
            cfg.model.label()
            + (f" ({self.core.plan.describe()})" if cfg.model.arch == "hornn" else ""),
            f"{self.core.num_parameters():,}",
            corpus.vocab_size,
            cfg.train.batch_size * cfg.train.bptt,
            counted(cfg.train.batch_size, "stream"),
            cfg.train.bptt,
            self.batch_per_process,
            counted(world, "process", "processes"),
            self.train_stream.steps_per_epoch,
            counted(cfg.train.epochs, "epoch"),
            f", max_steps {cfg.train.max_steps}" if cfg.train.max_steps else "",
            sizes,
            acc.device,
            f"mixed precision {self.precision.describe()}",
            self.step.describe(),
        )
        logger.info("threads: %s", self.threads)
        code = code_commit() if acc.is_main_process else dict(UNKNOWN)  # git runs once, on rank 0
        logger.info(
            "code: %s, hornn_dist %s, torch %s | machine: %s",
            describe_commit(code),
            __version__,
            torch.__version__,
            self.hardware,
        )
        clip = self.step.optim  # clip_mode "auto" resolved for this model
        logger.info(
            'recipe: %s | activation %s | clip %s %g, column norm %g, lr %g (docs/training.md, "The default recipe")',
            init_rule.describe(cfg.model),
            cfg.model.activation if cfg.model.arch in ("hornn", "rnn") else "(gates)",
            f"{clip.clip_mode}{' (auto)' if cfg.optim.clip_mode == 'auto' else ''}",
            clip.clip,
            cfg.optim.max_col_norm,
            cfg.optim.lr,
        )
        self.events.write(
            "start",
            step=self.progress.step,
            started=started,
            processes=world,
            device=str(acc.device),
            mixed_precision=self.precision.name,
            parameters=self.core.num_parameters(),
            steps_per_epoch=self.train_stream.steps_per_epoch,
            vocabulary=corpus.vocab_size,
            init=init_rule.describe(cfg.model),  # the recipe line's words: the stds it resolved
            clip_mode=clip.clip_mode,
            clip=clip.clip,
            code=code,  # the commit and whether the checkout was dirty: the record's evidence
            versions={"hornn_dist": __version__, "torch": torch.__version__},
            hardware=self.hardware,
            config=tomllib.loads(cfg.to_toml()),
        )

    # ------------------------------------------------------------------ loop

    def _loop(self) -> bool:
        """Run epochs from the current position; return True when stopped by a signal."""
        at_most = self.cfg.optim.stop_improvement > 0  # the stopping rule may end it sooner
        bar = self.bar = tqdm(
            total=self.cadence.total_steps,
            initial=self.progress.step,
            disable=not (self.accelerator.is_main_process and self.cfg.log.draws_progress()),
            unit="step",
            dynamic_ncols=True,
            # on a terminal the log lines stay and a stopped run leaves no bar below its stop
            # lines; in a file (log.progress = true) the bar's last state ends its line, so
            # that the next line (an error's, say) starts one
            leave=not on_terminal(),
            bar_format=AT_MOST_BAR if at_most else None,
        )
        self._loop_started = time.perf_counter()
        try:
            with logging_redirect_tqdm():  # log lines print above the bar
                return self._run_epochs(bar)
        finally:
            bar.close()
            self.bar = None
            self.progress.train_seconds = self._train_seconds()
            self._loop_started = None

    def _train_seconds(self) -> float:
        """Return the wall-clock seconds spent in the training loop, over all resumes, until now."""
        running = time.perf_counter() - self._loop_started if self._loop_started else 0.0
        return self.progress.train_seconds + running

    def _run_epochs(self, bar: Any) -> bool:
        """Train step after step until the run is over; the cadence says what follows each."""
        cfg, stream = self.cfg.train, self.train_stream
        running, speed = self.window, self.speed
        speed.rate()  # a new interval from the loop's start
        tokens_per_step = cfg.batch_size * cfg.bptt
        steps_run, timed_from = 0, 0.0
        while not self._run_over():
            then = self.cadence.after(self.progress.step + 1)
            if stream.step == 0:  # a new epoch starts from a zero history
                self.step.reset_state()
            x, y = stream.next_batch()
            self.schedule.start_step(self.progress.step + 1)
            loss = self.step.run(x, y, measure=then.log)
            self.progress.step += 1
            steps_run += 1
            running.add(loss)
            self.epoch_loss.add(loss)
            speed.add(tokens_per_step)
            bar.update(1)
            if then.log:
                loss_mean = float(self.accelerator.reduce(running.take(), reduction="mean"))
                self._log_train(loss_mean, speed.rate(), self.step.grad_norms(), bar)
            if then.end_epoch:
                self._end_epoch()
            elif then.validate:
                self._validate_and_save()
            elif then.save:
                self._save()
            if then.check_stop and self._stop_requested():
                with self.stop.saving_checkpoint():  # what a further signal is told
                    name = self.stop.signal_name
                    logger.info(
                        "%s received: checkpointing at step %d and exiting (%s waits for this "
                        "checkpoint)",
                        name,
                        self.progress.step,
                        "another Ctrl-C" if name == "SIGINT" else "another stop signal",
                    )
                    self._record_stop(by_signal=True)
                    # a step saved just now is saved again only to hold the stop's reason
                    saved_now = then.end_epoch or then.validate or then.save
                    self._save(
                        "recorded the stop in checkpoint" if saved_now else "saved checkpoint"
                    )
                return True
            if self.cadence.processes > 1 and steps_run == STOP_WARMUP_STEPS:
                timed_from = time.perf_counter()
            elif self.cadence.processes > 1 and steps_run == STOP_WARMUP_STEPS + STOP_TIMED_STEPS:
                self._time_stop_checks((time.perf_counter() - timed_from) / STOP_TIMED_STEPS)
        return False

    def _run_over(self) -> bool:
        """Return whether training is over: train.epochs or train.max_steps reached (the
        cadence's count) or the lr schedule converged at an epoch end."""
        return bool(self.cadence.end_reason(self.progress.step) or self.schedule.stopped)

    def _end_epoch(self) -> None:
        """Validate, step the lr schedule and checkpoint after an epoch's last batch; say the
        epoch's time (its steps and validations, up to its checkpoint) and train ppl."""
        train_loss = float(self.accelerator.reduce(self.epoch_loss.take(), reduction="mean"))
        result = self._validate(end_of_epoch=True)
        now = self._train_seconds()  # the next epoch's time starts here, as saved next
        seconds, self.progress.epoch_started = now - self.progress.epoch_started, now
        self._write_checkpoint()  # finiteness checked by the validation
        logger.info(
            "epoch %d of %d done in %s: train ppl %.2f, valid ppl %.2f%s",
            self.train_stream.epoch,  # epochs done, so the 1-based number of this one
            self.cfg.train.epochs,
            fmt_duration(seconds),
            perplexity(train_loss, 1) if math.isfinite(train_loss) else math.inf,
            result.ppl,
            "" if self._run_over() else f", lr for next epoch {self.schedule.lr:.4g}",
        )

    def _time_stop_checks(self, mine: float) -> None:
        """Set how often the ranks agree on a stop from the seconds per step of the steps just
        timed (each ended by a stop check, so host time is device time): the slowest rank's,
        the same on every rank."""
        times = torch.tensor([mine], dtype=torch.float64, device=self.accelerator.device)
        slowest = float(self.accelerator.gather(times).max().item())
        self.cadence = self.cadence.with_step_time(slowest)
        logger.info(
            "%d processes agree on a stop signal every %d steps (about %.0f s at %.3g s/step) "
            "and at each log step and epoch end",
            self.cadence.processes,
            self.cadence.stop_every,
            self.cadence.stop_every * slowest,
            slowest,
        )

    def _record_stop(self, by_signal: bool) -> None:
        """Say in TensorBoard why training ended; keep it for the trainer state and the log's
        last line."""
        if by_signal:
            reason = f"stopped by {self.stop.signal_name or 'a stop signal'}; run again to resume"
            code = "signal"
        elif self.schedule.stopped:
            reason, code = self.schedule.stopped, "converged"
        else:
            reason = self.cadence.end_reason(self.progress.step)
            code = self.cadence.end_code(self.progress.step)
        self.progress.stop_reason = reason
        signal = (self.stop.signal_name or "a stop signal") if by_signal else ""
        self.events.write("stop", step=self.progress.step, code=code, signal=signal, reason=reason)
        writer = self._tensorboard_writer()
        if writer is not None:
            dashboard.record_stop(writer, reason, self.progress.step)

    def _tensorboard_writer(self) -> Any:
        """Return the run's TensorBoard SummaryWriter on the main process, else None."""
        if "tensorboard" in self.trackers and self.accelerator.is_main_process:
            return self.accelerator.get_tracker("tensorboard", unwrap=True)
        return None

    def _check_finite(self) -> None:
        bad_step = self.step.bad_step
        bad = int(self.accelerator.reduce(bad_step.clone(), reduction="sum"))
        if bad:
            raise NonFiniteLossError(
                f"training loss became NaN/inf at step {int(bad_step) or bad}; nothing was saved "
                f'after it. Lower optim.lr, set optim.clip, or try train.mixed_precision="no" '
                f'(under mixed precision, model.recurrence_precision="autocast" keeps HORNN '
                f"layers out of fp16, whose range ends at 65504)"
            )

    def _stop_requested(self) -> bool:
        if self.accelerator.num_processes == 1:  # no device round trip: the step stays async
            return self.stop.requested
        flag = torch.tensor(int(self.stop.requested), device=self.accelerator.device)
        requested = bool(self.accelerator.reduce(flag, reduction="sum").item())
        if requested and not self.stop.signal_name:
            self.stop.signal_name = "stop signal (another rank)"
        return requested

    # ------------------------------------------------------------------ evaluation, logging, saving

    def _score(self, model: torch.nn.Module, split: str) -> EvalResult:
        """Return `model`'s result on `split` in the run's evaluation streams."""
        train = self.cfg.train
        return score_split(
            model, self.corpus, split, self.accelerator, train.eval_batch_size, train.bptt
        )

    def _evaluate(self, split: str) -> EvalResult:
        with self._doing(f"evaluating the {split} split"), self._off_the_clock():
            return self._score(self.core, split)

    @contextmanager
    def _off_the_clock(self) -> Iterator[None]:
        """Keep the enclosed time (a validation, a checkpoint) out of tokens/s."""
        started = time.perf_counter()
        try:
            yield
        finally:
            if self._loop_started is not None:  # the test split after the loop is not in it
                paused = time.perf_counter() - started
                self.speed.exclude(paused)
                self.progress.paused_seconds += paused

    @contextmanager
    def _doing(self, phase: str) -> Iterator[None]:
        """Name what the loop is doing for the error of a collective that fails meanwhile, and
        on the progress bar, which stands still meanwhile."""
        before, self.phase = self.phase, phase
        bar = self.bar if self.bar is not None and not self.bar.disable else None
        said = bar.desc if bar is not None else ""
        if bar is not None:
            bar.set_description_str(phase, refresh=True)
        yield
        self.phase = before
        if bar is not None:
            bar.set_description_str(said, refresh=False)

    def _validate_and_save(self) -> EvalResult:
        result = self._validate()
        self._write_checkpoint()  # finiteness checked by the validation
        return result

    def _validate(self, end_of_epoch: bool = False) -> EvalResult:
        """Check the loss stayed finite, validate, step the schedule at an epoch end, track the best."""
        self._check_finite()  # before validating: a NaN model is reported as training's NaN
        result = self._evaluate("valid")
        if not math.isfinite(result.loss):
            raise NonFiniteLossError(
                f"validation loss is not finite at step {self.progress.step}; lower optim.lr"
            )
        if end_of_epoch:
            self.schedule.end_epoch(result.loss)
        self.progress.valid_history.append(
            {
                "step": self.progress.step,
                "epoch": self.progress.step / self.train_stream.steps_per_epoch,
                "loss": result.loss,
                "ppl": result.ppl,
                "lr": self.schedule.lr,
            }
        )
        self._warn_if_worse_than_uniform(result)
        is_best = result.loss < self.progress.best_valid
        if is_best:
            self.progress.best_valid = result.loss
            self.progress.best_checkpoint = ckpt.step_dir_name(self.progress.step)
        self._track({"valid/loss": result.loss, "valid/ppl": result.ppl})  # train/lr: log steps
        self._draw({"valid": result.loss})
        self.events.write(
            "valid",
            step=self.progress.step,
            epoch=self.progress.step / self.train_stream.steps_per_epoch,
            loss=result.loss,
            ppl=result.ppl,
            lr=self.schedule.lr,
            best=is_best,
        )
        logger.info(
            "step %d: valid loss %.4f, ppl %.2f%s",
            self.progress.step,
            result.loss,
            result.ppl,
            " (best)" if is_best else "",
        )
        self.progress.last_valid_step = self.progress.step
        return result

    def _warn_if_worse_than_uniform(self, result: EvalResult) -> None:
        """Warn when validation perplexity exceeds the vocabulary size: the model predicts
        worse than a uniform guess, the mark of a recipe that does not train this model."""
        vocab = self.corpus.vocab_size
        if result.ppl <= vocab:
            return
        logger.warning(
            "valid ppl %.1f at step %d is above the vocabulary size %d (worse than guessing "
            "uniformly): the recipe does not train this model; lower optim.lr, set "
            'optim.clip_mode = "norm" with optim.clip = 0.25, set optim.max_col_norm, or try '
            "another model.activation",
            result.ppl,
            self.progress.step,
            vocab,
        )
        self._track({"valid/worse_than_uniform": 1.0})

    def _warn_if_train_worse_than_uniform(self, ppl: float) -> None:
        """Warn, once a run, when a logged train window's perplexity exceeds the vocabulary
        size: the start diverges before it learns (a spike a warmup or smaller steps remove)."""
        vocab, step = self.corpus.vocab_size, self.progress.step
        if self._train_spike_warned or ppl <= vocab:
            return
        self._train_spike_warned = True
        logger.warning(
            "train ppl %.1f in the window up to step %d is above the vocabulary size %d (worse "
            "than guessing uniformly): the start is too hot for this model on this corpus; set "
            "optim.warmup_steps (e.g. 300), lower model.feedback_scale, optim.lr or optim.clip",
            ppl,
            step,
            vocab,
        )
        self._track({"train/worse_than_uniform": 1.0})

    def _log_train(
        self, loss: float, tokens_per_sec: float, norms: dict[str, float], bar: Any
    ) -> None:
        ppl = perplexity(loss, 1) if math.isfinite(loss) else math.inf
        values = {
            "train/loss": loss,
            "train/ppl": ppl,
            "train/lr": self.schedule.step_lr,
            "train/tokens_per_sec": tokens_per_sec,
            **norms,
        }
        self._track(values)
        self._draw({"train": loss})
        self._warn_if_train_worse_than_uniform(ppl)
        if self.lines is not None:
            self.lines.write_norms(norms, self.progress.step)
        step, cadence = self.progress.step, self.cadence
        epoch, batch = cadence.position(step)
        in_epoch, in_run = cadence.steps_left(step)
        tokens_per_step = self.cfg.train.batch_size * self.cfg.train.bptt
        seconds_per_step = tokens_per_step / max(tokens_per_sec, 1e-9)
        epoch_left = in_epoch * seconds_per_step  # training only: validations add their time
        run_left = None if in_run is None else in_run * seconds_per_step
        self.events.write(
            "train",
            step=step,
            epoch=step / self.train_stream.steps_per_epoch,
            loss=loss,
            ppl=ppl,
            lr=self.schedule.step_lr,
            tokens_per_sec=tokens_per_sec,
            grad_norm=norms.get("grad_norm/total", math.nan),
            path_grad_norms={k: v for k, v in norms.items() if k != "grad_norm/total"},
            epoch_seconds_left=epoch_left,
            run_seconds_left=run_left,
        )
        epochs = self.cfg.train.epochs
        bar.set_postfix(
            epoch=f"{epoch}/{epochs}",
            loss=f"{loss:.3f}",
            ppl=f"{ppl:.1f}",
            lr=f"{self.schedule.step_lr:.3g}",
            tok_s=f"{tokens_per_sec:,.0f}",
            refresh=False,
        )
        left = f"{fmt_duration(epoch_left)} left in the epoch"
        if run_left is not None:  # "at most": the stopping rule may end the run sooner
            left += f", {fmt_duration(run_left)} in the run at most"
        logger.info(
            "step %d: loss %.4f, ppl %.2f, lr %.4g, %.0f tokens/s, grad norm %.3f; epoch %d/%d, "
            "batch %d/%d, %s",
            step,
            loss,
            ppl,
            self.schedule.step_lr,
            tokens_per_sec,
            norms.get("grad_norm/total", math.nan),
            epoch,
            epochs,
            batch,
            self.train_stream.steps_per_epoch,
            left,
        )

    def _track(self, values: dict[str, float], step: int | None = None) -> None:
        """Send `values` to every tracker at `step` (default: this step)."""
        if self.trackers:
            self.accelerator.log(values, step=self.progress.step if step is None else step)

    def _draw(self, losses: dict[str, float], step: int | None = None) -> None:
        """Draw each split's loss (train, valid, test) as a line of its own on TensorBoard's
        loss chart (dashboard.Lines), at `step` (default: this step)."""
        if self.lines is not None:
            step = self.progress.step if step is None else step
            self.lines.write(dashboard.LOSS_LINES, losses, step)

    def _save(self, saved: str = "saved checkpoint") -> Path:
        """Check the loss stayed finite, then write a checkpoint of this step (its line says
        `saved`)."""
        self._check_finite()
        return self._write_checkpoint(saved)

    def _write_checkpoint(self, saved: str = "saved checkpoint") -> Path:
        acc, step = self.accelerator, self.progress.step
        seconds = self._train_seconds()  # in the loop so far, validation included
        training = seconds - self.progress.paused_seconds  # what tokens/s counts
        tokens = step * self.cfg.train.batch_size * self.cfg.train.bptt
        state = replace(
            self.progress,
            epoch=self.train_stream.epoch,
            train_seconds=seconds,
            tokens_per_sec=tokens / training if training > 0 else 0.0,
            hardware=self.hardware,
        )
        with (
            self._doing("saving a checkpoint"),
            self._off_the_clock(),
            self.stop.saving_checkpoint(),
        ):
            folder = self.checkpointer.save(state)
        if acc.is_main_process:
            ckpt.prune_checkpoints(
                self.out, self.cfg.train.keep_checkpoints, self.progress.best_checkpoint
            )
        acc.wait_for_everyone()
        logger.info("%s %s (%s)", saved, folder, self._checkpoint_note(step))
        return folder

    def _checkpoint_note(self, step: int) -> str:
        """Return what the save line says of a checkpoint: its validation, with the best mark."""
        history = self.progress.valid_history
        if not history or history[-1]["step"] != step:
            return f"step {step}, not validated"
        best = self.progress.best_checkpoint == ckpt.step_dir_name(step)
        return f"valid ppl {history[-1]['ppl']:.2f}{', best' if best else ''}"
