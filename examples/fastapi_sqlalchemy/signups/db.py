"""The app's database: one async SQLAlchemy engine on $DATABASE_URL (``postgresql://...`` or
SQLAlchemy's ``postgresql+psycopg://...``; pgqueue takes either)."""

import os

from sqlalchemy import String
from sqlalchemy.ext.asyncio import async_sessionmaker, create_async_engine
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

DATABASE_URL = os.environ["DATABASE_URL"]
# SQLAlchemy needs the driver in the URL; psycopg 3 is the one pgqueue works with.
engine = create_async_engine(
    DATABASE_URL.replace("postgresql://", "postgresql+psycopg://", 1)
    if DATABASE_URL.startswith("postgresql://")
    else DATABASE_URL
)
Session = async_sessionmaker(engine, expire_on_commit=False)


class Base(DeclarativeBase):
    pass


class User(Base):
    __tablename__ = "users"
    id: Mapped[int] = mapped_column(primary_key=True)
    email: Mapped[str] = mapped_column(String(200))
    welcomed: Mapped[bool] = mapped_column(default=False)
