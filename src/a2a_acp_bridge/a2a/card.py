"""The agent card: who answers, where, and how.

Name and description come from the adapter's own `agentInfo` (reported at initialize) once
an adapter has started; until then the preset's label stands in. Interfaces are built from
the advertised URL: JSON-RPC at `/`, HTTP+JSON under `/rest`, both A2A 1.0. Both endpoints
also serve A2A 0.3 clients; declaring that in the card (`with_v03`, A2A_CARD_V03) makes the
SDK add the 0.3 top-level fields (`url`, `preferredTransport`, `protocolVersion`), which
the 1.0 card schema does not allow, so it is off by default.
"""

from __future__ import annotations

from a2a.types.a2a_pb2 import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
    HTTPAuthSecurityScheme,
    OpenIdConnectSecurityScheme,
    SecurityRequirement,
    SecurityScheme,
    StringList,
)

from a2a_acp_bridge import __version__
from a2a_acp_bridge.agent import AgentInfo, PromptCapabilities
from a2a_acp_bridge.jwt_bearer import JwtPolicy

# What every agent is given (text and data parts become text); the rest depends on what
# the agent advertised at initialize (acp/prompt.py decides how each file reaches it).
BASE_INPUT_MODES = ["text/plain", "application/json"]
IMAGE_MODES = ["image/png", "image/jpeg", "image/gif", "image/webp"]
AUDIO_MODES = ["audio/wav", "audio/mpeg"]
# Before the first adapter has started, the modes the bridge itself can carry.
INPUT_MODES = [*BASE_INPUT_MODES, "image/png", "image/jpeg", "application/octet-stream"]


def input_modes(caps: PromptCapabilities | None) -> list[str]:
    """The media types the agent accepts, once its prompt capabilities are known."""
    if caps is None:
        return list(INPUT_MODES)
    modes = list(BASE_INPUT_MODES)
    if caps.image:
        modes += IMAGE_MODES
    if caps.audio:
        modes += AUDIO_MODES
    if caps.embedded_context:
        modes.append("application/octet-stream")
    return modes


OUTPUT_MODES = ["text/plain", "application/json", "text/x-diff"]
# The name of the bearer scheme in `securitySchemes` (A2A_TOKEN / A2A_TOKEN_FILE).
BEARER_SCHEME = "bearer"
# The names of the identity provider's schemes (A2A_JWT_ISSUER): its OpenID Connect
# discovery document, and the same tokens as an HTTP bearer scheme (format JWT) for
# clients that read only those. Either satisfies the card's requirements.
OIDC_SCHEME = "oidc"
JWT_BEARER_SCHEME = "jwt"


def build_card(
    *,
    base_url: str,
    label: str,
    agent_info: AgentInfo | None,
    name: str | None = None,
    supervised: bool = True,
    bearer: bool = False,
    oidc: JwtPolicy | None = None,
    with_v03: bool = False,
    prompt_capabilities: PromptCapabilities | None = None,
    isolation: str = "",
) -> AgentCard:
    """The card for the current state of the bridge."""
    agent = label
    version = ""
    if agent_info is not None:
        agent = agent_info.title or agent_info.name or label
        version = agent_info.version or ""
    shown = f"{agent} {version}".strip()
    description = (
        f"An A2A front for {shown}, an ACP coding agent. Each conversation (contextId) works in "
        "its own directory; the bridge decides every permission request itself and reports "
        "every refusal in the task."
    )
    if not supervised:
        description += (
            " The bridge does not know this adapter's supervised mode, so the agent runs in "
            "its own default mode."
        )
    if isolation:
        description += " " + isolation
    base = base_url.rstrip("/")
    versions = ("1.0", "0.3") if with_v03 else ("1.0",)
    interfaces = [
        AgentInterface(url=url, protocol_binding=binding, protocol_version=version)
        for version in versions
        for url, binding in ((f"{base}/", "JSONRPC"), (f"{base}/rest", "HTTP+JSON"))
    ]
    card = AgentCard(
        name=name or f"{agent} (via ACP)",
        description=description,
        supported_interfaces=interfaces,
        version=__version__,
        capabilities=AgentCapabilities(streaming=True, push_notifications=True),
        default_input_modes=input_modes(prompt_capabilities),
        default_output_modes=OUTPUT_MODES,
        skills=[
            AgentSkill(
                id="coding",
                name="Coding agent",
                description=(
                    f"Hand {agent} a coding task in plain words: it reads, writes and runs code "
                    "in the conversation's working directory, within the bridge's boundary."
                ),
                tags=["code", "acp", label],
                examples=["write hello.py: print('hello')", "run python3 hello.py"],
            )
        ],
    )
    if bearer:
        card.security_schemes[BEARER_SCHEME].CopyFrom(
            SecurityScheme(
                http_auth_security_scheme=HTTPAuthSecurityScheme(
                    scheme="Bearer",
                    description="A token the operator set (A2A_TOKEN or A2A_TOKEN_FILE).",
                )
            )
        )
        card.security_requirements.append(
            SecurityRequirement(schemes={BEARER_SCHEME: StringList(list=[])})
        )
    if oidc is not None:
        scopes = [oidc.required_scope] if oidc.required_scope else []
        card.security_schemes[OIDC_SCHEME].CopyFrom(
            SecurityScheme(
                open_id_connect_security_scheme=OpenIdConnectSecurityScheme(
                    open_id_connect_url=oidc.discovery_url,
                    description=f"An access token (JWT) of {oidc.issuer} for the audience "
                    f"{oidc.audience}.",
                )
            )
        )
        card.security_schemes[JWT_BEARER_SCHEME].CopyFrom(
            SecurityScheme(
                http_auth_security_scheme=HTTPAuthSecurityScheme(
                    scheme="Bearer",
                    bearer_format="JWT",
                    description=f"An access token (JWT) of {oidc.issuer}.",
                )
            )
        )
        for name in (OIDC_SCHEME, JWT_BEARER_SCHEME):
            card.security_requirements.append(
                SecurityRequirement(schemes={name: StringList(list=scopes)})
            )
    return card
