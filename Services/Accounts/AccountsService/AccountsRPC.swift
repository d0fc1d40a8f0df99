import IAPProtocol
import JSONRPC
import RPCTransport
import ServiceSupport

extension AccountsService {
    /// The `accounts.*` methods of the v1 contract, on this service.
    public func router() -> RPCRouter {
        var r = RPCRouter()
        r.register(AccountsRegister.self) { p, ctx in try await self.register(p, clientAddress: try self.clientAddress(p, peer: ctx.remoteAddress)) }
        r.register(AccountsLogin.self) { p, ctx in try await self.login(p, clientAddress: try self.clientAddress(p, peer: ctx.remoteAddress)) }
        r.registerBlocking(AccountsLogout.self) { p, _ in
            try self.logout(p.session)
            return EmptyResult()
        }
        r.registerImmediateOrBlocking(
            AccountsAuthenticate.self,
            immediate: { p, _ in
                try TokenGate.internal.check(p.internalToken, configured: self.configuration.internalToken)
                return try self.authenticateWithoutWaiting(p.session)
            },
            handler: { p, _ in
                try TokenGate.internal.check(p.internalToken, configured: self.configuration.internalToken)
                return try self.authenticate(p.session)
            })
        r.register(AccountsChangePassword.self) { p, _ in
            try await self.changePassword(p)
            return EmptyResult()
        }
        r.registerBlocking(AccountsListSessions.self) { p, _ in .init(sessions: try self.listSessions(p.session)) }
        r.register(AccountsFindByAppAccountToken.self) { p, _ in .init(accountId: try await self.findByAppAccountToken(p)) }
        r.register(AccountsFindByUsername.self) { p, _ in try await self.findByUsername(p) }
        r.register(AccountsSetConsumptionConsent.self) { p, _ in try await self.setConsumptionConsent(p) }
        r.register(AccountsConsumptionProfile.self) { p, _ in try await self.consumptionProfile(p) }
        r.register(AccountsLinkAppTransaction.self) { p, _ in try await self.linkAppTransaction(p) }
        r.register(AccountsAppleCustomer.self) { p, _ in try await self.appleCustomer(p) }
        r.register(AccountsGetAccount.self) { p, _ in try await self.getAccount(p) }
        r.register(AccountsRevokeSessions.self) { p, _ in
            try TokenGate.internal.check(p.internalToken, configured: self.configuration.internalToken)
            return .init(ended: try await self.run { try await self.store.deleteSessions(accountId: p.accountId) })
        }
        return r
    }
}
