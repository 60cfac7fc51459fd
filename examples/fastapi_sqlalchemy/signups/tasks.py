"""The app's tasks; workers run them with ``pgq work signups.tasks:pgq``."""

from pgqueue import PgQueue
from signups.db import DATABASE_URL, Session, User

pgq = PgQueue(DATABASE_URL)


@pgq.task(result_ttl=3600)
async def send_welcome(user_id: int) -> str:
    async with Session() as session, session.begin():
        user = await session.get_one(User, user_id)
        user.welcomed = True  # (a real app would send the e-mail here)
        return f"welcomed {user.email}"
