"""Types: the frozen spec, results, errors, policy/env references and pure statistics helpers.

Data and pure functions only: nothing here steps an env, loads a policy or writes a run folder.
"""
