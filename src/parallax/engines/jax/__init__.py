"""The JAX/Flax engine (``JaxEngine`` in ``engine.py``).

Modules: ``model`` (the Flax LLaMA), ``convert`` (canonical <-> Flax weights), ``runtime``
(import, device, attention choice, optimizer, jitted step), ``timing`` (the timed loop),
``training`` (``JaxEngine.train``), ``reference`` (the parity ReferenceTrainer). Importing this
package or ``engine`` does not import JAX.
"""
