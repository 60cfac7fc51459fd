"""``uvicorn signups.app:app``: sign-ups enqueue their welcome job in the request's transaction
(the job exists if and only if the user row does); a second endpoint awaits a job's result."""

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Annotated

from fastapi import Depends, FastAPI, HTTPException
from pydantic import BaseModel
from sqlalchemy.ext.asyncio import AsyncSession

from pgqueue import ResultTimeoutError
from signups.db import Base, Session, User, engine
from signups.tasks import pgq, send_welcome


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    async with engine.begin() as conn:
        await conn.run_sync(Base.metadata.create_all)
    async with pgq:  # at shutdown: closes pgqueue's pools and its results listener
        yield
    await engine.dispose()


app = FastAPI(lifespan=lifespan)


async def session() -> AsyncIterator[AsyncSession]:
    async with Session() as s:
        yield s


class SignUp(BaseModel):
    email: str
    fail: bool = False  # for the demo: roll the request's transaction back after enqueueing


@app.post("/signups")
async def sign_up(body: SignUp, db: Annotated[AsyncSession, Depends(session)]) -> dict[str, int]:
    user = User(email=body.email)
    db.add(user)
    await db.flush()
    job = await send_welcome.enqueue_async(user.id, conn=db)  # in the session's transaction
    if body.fail:
        await db.rollback()  # the user and the job go together
        raise HTTPException(409, "refused")
    await db.commit()
    return {"user": user.id, "job": job}


@app.get("/jobs/{job_id}")
async def job_result(job_id: int) -> dict[str, str]:
    try:
        return {"result": await pgq.result_async(job_id, timeout=30)}
    except ResultTimeoutError:
        raise HTTPException(504, "still running") from None
