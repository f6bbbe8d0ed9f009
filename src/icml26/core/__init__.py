"""What more than one method needs: claims and their runner, the report, models, text, I/O.

Nothing here imports a method folder. Import submodules directly (``icml26.core.lm``); this
package's ``__init__`` stays empty so that ``icml26 list`` never pulls in torch.
"""
