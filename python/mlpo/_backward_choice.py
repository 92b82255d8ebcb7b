"""Whether and when the update during backward (_backward.py) runs: where
it cannot (this torch's FSDP, device parameters), the plain step is said
once per reason (PlainStepNote); where the default leaves the choice to
mlpo, AutoChoice measures which of the two exact ways is faster on the
job itself."""
import functools
import statistics
import time

from ._warn import warn_user

_told_plain = set()


@functools.lru_cache(maxsize=None)
def fsdp_hooks_after_reduce():
    """Whether this torch's FSDP (fully_shard) runs a sharded parameter's
    post-accumulate-grad hooks after its reduce-scatter has put this
    rank's shard of the gradient in place (torch's own support for an
    optimizer in backward, in foreach_reduce): then each shard is final
    when its hook runs. Read from torch's source, as no flag says so
    (once per process)."""
    try:
        import inspect
        from torch.distributed.fsdp._fully_shard import \
            _fsdp_collectives as collectives
        return "_post_accumulate_grad_hooks" in \
            inspect.getsource(collectives.foreach_reduce)
    except Exception:  # another layout of torch's FSDP: the plain step
        return False


class AutoChoice:
    """update_in_backward left at its default: the faster of the two ways
    to step, measured on the job itself. Both are exact; which is faster
    depends on the machine (on two cores the update competes with
    backward for the CPU; with idle cores and slow storage it hides the
    I/O). Steps alternate between them for a probe (PROBE each, after
    SKIP steps of warm-up), iteration times (step() return to step()
    return) are compared by median, and the winner runs for KEEP steps
    before the next probe."""
    SKIP, PROBE, KEEP = 2, 3, 200

    def __init__(self, agree=None):
        self.agree = agree  # data parallel: the ranks' times, combined
        self.plan = [False] * self.SKIP + [True, False] * self.PROBE
        self.times = {True: [], False: []}
        self.last = None      # when the last step() returned
        self.probing = True
        self.chosen = None    # the last probe's winner

    def speculate(self):
        """Whether the step about to run runs during backward."""
        return self.plan[0] if self.plan else True

    def stepped(self, speculated):
        now = time.perf_counter()
        # (an iteration's time is this step's: its forward and backward,
        # then its step)
        if self.last is not None and self.probing and \
                len(self.plan) <= 2 * self.PROBE:
            self.times[speculated].append(now - self.last)
        self.last = now
        if self.plan:
            self.plan.pop(0)
        if self.plan:
            return
        if self.probing:
            a, b = self.times[True], self.times[False]
            if a and b:
                ma, mb = statistics.median(a), statistics.median(b)
                if self.agree is not None:
                    ma, mb = self.agree([ma, mb])
                self.chosen = ma < mb
            else:
                self.chosen = False
            self.plan = [self.chosen] * self.KEEP
            self.probing = False
        else:
            self.plan = [True, False] * self.PROBE
            self.times = {True: [], False: []}
            self.probing = True



class PlainStepNote(UserWarning):
    """The update during backward is off where it cannot run."""


def note_plain_step_once(why):
    """update_in_backward left at its default where it cannot run: said
    once per process and reason (the plain step's results are the same)."""
    if why in _told_plain:
        return
    _told_plain.add(why)
    warn_user(f"mlpo.torch: the update during backward is off ({why}); "
              "step() runs the whole update (the results are the same). "
              "update_in_backward=False says so and silences this",
              PlainStepNote)
