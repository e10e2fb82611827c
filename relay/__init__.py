"""The relay: a FastAPI service that receives upstream webhooks, stores them, dispatches
them to every allowlisted backend repository, takes callbacks and posts check runs."""
