"""vLLM-v1-style scheduler over the unified pool (see scheduler.py for the contract)."""
from engine_under_test.scheduler.output import ScheduledRequest, SchedulerOutput
from engine_under_test.scheduler.request import Request, RequestStatus
from engine_under_test.scheduler.scheduler import Scheduler

__all__ = ["Request", "RequestStatus", "ScheduledRequest", "Scheduler", "SchedulerOutput"]
