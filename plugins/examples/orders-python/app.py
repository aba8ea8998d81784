"""The `orders` plugin's component entry point (componentize-py's app module).

componentize-py builds the component from this module for world `plugin` of
`weir:transform@0.1.0`: the class `Transform` implements the exported interface's
functions (`describe`), and the module `transform` (`transform.py`) its `session`
resource. The logic is `orders.py`; the conversions are `wit_glue.py`.

Build: `componentize-py -d wit/transform-0.1.0 -w plugin componentize -p
plugins/examples/orders-python app -o orders-python.wasm` (`scripts/build-plugins`
does it).
"""

import wit_world
from wit_world.exports import transform as wit

import orders
import wit_glue


class Transform(wit_world.exports.Transform):
    """The exported `transform` interface's functions."""

    def describe(self) -> wit.Description:
        """The plugin's description (a constant)."""
        return wit_glue.description_to_wit(orders.describe())
