# triggerhook daemon image. Build: docker build -t triggerhook .
# Run:   docker run --rm -e TRIGGERHOOK_DATABASE_URL=... -e TRIGGERHOOK_AMQP_URL=... triggerhook
FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml constraints.txt README.md ./
COPY triggerhook ./triggerhook
RUN pip wheel --no-cache-dir --wheel-dir /wheels -c constraints.txt .

FROM python:3.11-slim
RUN useradd --system --uid 10001 --home-dir /nonexistent triggerhook
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir /wheels/*.whl && rm -rf /wheels
COPY config/triggerhook.toml /etc/triggerhook/triggerhook.toml
ENV TRIGGERHOOK_CONFIG=/etc/triggerhook/triggerhook.toml
USER triggerhook
STOPSIGNAL SIGTERM
ENTRYPOINT ["triggerhook"]
CMD ["run"]
