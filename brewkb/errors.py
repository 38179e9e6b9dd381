"""The exceptions brewkb raises on purpose.

Every message says what went wrong and what to do next. The CLI prints a
``BrewError`` as one line and exits 1; anything else is a bug.

    BrewError
    ├── ConfigError        brewkb.toml is missing a value or has a wrong one
    ├── RecipeError        a recipe file cannot be parsed or is invalid
    ├── GitError           the KB repository cannot be used as asked
    │   ├── NotARepoError
    │   ├── RefConflictError   a ref moved under us (compare-and-swap refused)
    │   └── MergeConflictError two branches changed the same file
    ├── IndexError_        the retrieval index cannot be built or read
    ├── LLMError           an endpoint call failed after its retries, or a reply was unusable
    ├── EndpointDown       an endpoint refused its connections: the command stops (finished work is kept)
    ├── TrajectoryError    a trajectory or an import file is malformed
    ├── AgentError         an agent adapter is misconfigured
    ├── RunError           a run folder is missing or inconsistent
    │   ├── AllFailedError every item of a stage (or every episode of a batch) failed
    │   └── PartlyFailedError  some items of a stage failed (stages.accept_failed goes on without them)
    ├── NotBetterError     a distilled KB does not beat a baseline or its base KB (`distill --require-better`)
    ├── ServeError         `brewkb serve` cannot start as asked (its port is taken, its upstream is no URL)
    ├── DiskFullError      no space left on the device brewkb was writing to
    └── BudgetExhausted    a run reached --max-episodes/--max-llm-calls/--max-cost (exit 75, not a failure)
"""

from __future__ import annotations


class BrewError(Exception):
    """Base of every error brewkb raises on purpose."""


class ConfigError(BrewError):
    pass


class RecipeError(BrewError):
    """``line`` is the 1-based line of the file the problem is on, when known."""

    def __init__(self, message: str, line: int | None = None) -> None:
        super().__init__(message)
        self.line = line


class GitError(BrewError):
    pass


class NotARepoError(GitError):
    pass


class RefConflictError(GitError):
    pass


class MergeConflictError(GitError):
    pass


class IndexError_(BrewError):
    pass


class LLMError(BrewError):
    pass


class EndpointDown(BrewError):
    """An endpoint could not be reached several calls in a row. Not an
    ``LLMError``: no stage records it as one failed item, the command stops.
    ``retry`` says how to go on once the endpoint runs."""

    RETRY = "then run the same command again: what finished is kept"

    def __init__(self, message: str, retry: str = RETRY) -> None:
        super().__init__(f"{message}; {retry}")
        self.what, self.retry = message, retry

    def with_retry(self, retry: str) -> EndpointDown:
        """The same stop, telling the command that resumes this run."""
        return EndpointDown(self.what, retry)



class TrajectoryError(BrewError):
    pass


class AgentError(BrewError):
    pass


class RunError(BrewError):
    pass


class AllFailedError(RunError):
    """Every item of a stage, or every episode of a batch, failed: nothing of
    it is recorded as done, and running again retries the items."""


class PartlyFailedError(RunError):
    """Some items of a stage failed: the others are saved, the stage is not
    recorded as done, and running again retries only the failed ones."""


class NotBetterError(BrewError):
    """The new KB does not beat every baseline, or the base KB, on the test
    split; the PR branch is written all the same."""


class ServeError(BrewError):
    pass


class DiskFullError(BrewError):
    """A write found no room (a full disk, a quota, a file size limit); the
    message names the file and how to continue once there is room."""

    @classmethod
    def of(cls, exc: OSError, retry: str = "run the same command again") -> DiskFullError:
        where = f" writing {exc.filename}" if exc.filename else ""
        return cls(f"no space left on the device{where} ({exc.strerror}); free some space, then {retry} "
                   "(finished work is kept)")


class BudgetExhausted(BrewError):
    """A run reached a limit; ``option`` names it (``--max-llm-calls``). What
    finished is saved; ``refine --resume`` with a higher limit continues."""

    def __init__(self, message: str, option: str) -> None:
        super().__init__(message)
        self.option = option
