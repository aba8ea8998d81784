"""The `session` resource of the exported `transform` interface.

componentize-py looks for the implementation of an exported interface's resources in
the module named after the interface (`transform`), as a class named after the
resource (`Session`). It adapts `orders.Session` (the logic, in `orders.py`) to the
bindings with `wit_glue.py`; an `orders.PluginError` becomes the WIT `error` of the
call (raised as `componentize_py_types.Err`).
"""

from typing import List, Tuple

from wit_world.exports import transform as wit

import orders
import wit_glue


class Session(wit.Session):
    """One partition job (see `orders.Session` for its semantics)."""

    def __init__(self, partition: wit.PartitionInfo, config: List[Tuple[str, str]]) -> None:
        self._session = orders.Session(
            (partition.table, partition.name), wit_glue.config_from_wit(config)
        )

    def push(self, rows: List[wit.StagedRow]) -> wit.PushOutput:
        """Transforms a chunk of staged rows."""
        try:
            out = self._session.push([wit_glue.staged_row_from_wit(r) for r in rows])
        except orders.PluginError as error:
            raise wit_glue.error_to_wit(error) from None
        return wit_glue.push_output_to_wit(out)

    def finish(self) -> wit.PushOutput:
        """Ends the job."""
        try:
            out = self._session.finish()
        except orders.PluginError as error:
            raise wit_glue.error_to_wit(error) from None
        return wit_glue.push_output_to_wit(out)
