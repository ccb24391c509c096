"""fedbuff's refusals, while the config is built: sizes that cannot hold, the stacked
path's and the server optimizer's settings as fedavg checks them, and --personalize's as
fedavg checks them. (DP is refused where any
setting a strategy does not take is, with the reason: ``settings.WITHOUT_DP``.)"""

from __future__ import annotations

from ...errors import UserError
from ...errors import setting_name as named   # as the caller spelled the setting
from ..fedavg.personal_setup import check_personalize_config
from ..fedavg.refusals import check_client_path_and_server
from .settings import buffer_size_of, concurrency_of


def check_fedbuff_config(config) -> None:
    f = config.fedavg
    concurrency, buffer = concurrency_of(f), buffer_size_of(f)
    if concurrency > f.clients:
        raise UserError(f"{named('concurrency')} {concurrency} is more than {named('clients')} "
                        f"{f.clients}: a client trains one update at a time; give at most "
                        "every client")
    if buffer > concurrency:
        raise UserError(f"{named('buffer_size')} {buffer} is more than {named('concurrency')} "
                        f"{concurrency}: the buffer fills from the clients in flight; give "
                        f"at most {concurrency} (1 is FedAsync)")
    check_client_path_and_server(config)
    check_personalize_config(config)
