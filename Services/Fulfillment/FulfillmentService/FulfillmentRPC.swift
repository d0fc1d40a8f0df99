import IAPProtocol
import JSONRPC
import RPCTransport

extension FulfillmentService {
    /// The `fulfillment.*` methods of the v1 contract, on this service.
    public func router() -> RPCRouter {
        var r = RPCRouter()
        r.register(FulfillmentRedeem.self) { p, _ in try await self.redeem(p, mode: .redeem) }
        r.register(FulfillmentRestore.self) { p, _ in try await self.redeem(p, mode: .restore) }
        r.register(FulfillmentGetEntitlements.self) { p, _ in try await self.entitlements(p) }
        r.register(FulfillmentGetBalance.self) { p, _ in try await self.balance(p) }
        r.register(FulfillmentSpendCoins.self) { p, _ in try await self.spend(p) }
        r.register(FulfillmentListLedger.self) { p, _ in try await self.ledger(p) }
        r.register(FulfillmentListContent.self) { p, _ in try await self.listContent(p) }
        r.register(FulfillmentReadContent.self) { p, _ in try await self.readContent(p) }
        r.register(FulfillmentContentURL.self) { p, _ in try await self.contentURL(p) }
        r.register(FulfillmentApplyNotification.self) { p, _ in try await self.applyNotification(p) }
        r.register(FulfillmentReceiveNotification.self) { p, _ in try await self.receiveNotification(p) }
        r.register(FulfillmentListNotifications.self) { p, _ in try await self.listNotifications(p) }
        r.register(FulfillmentListOutbox.self) { p, _ in try await self.listOutbox(p) }
        r.register(FulfillmentRetryNotification.self) { p, _ in try await self.retryNotification(p) }
        r.register(FulfillmentLookUpOrder.self) { p, _ in try await self.lookUpOrder(p) }
        r.register(FulfillmentListAudit.self) { p, _ in try await self.listAudit(p) }
        r.register(FulfillmentGrantOrder.self) { p, _ in try await self.grantOrder(p) }
        r.register(FulfillmentExtendSubscription.self) { p, _ in try await self.extendSubscription(p) }
        r.register(FulfillmentReconcile.self) { p, _ in try await self.reconcile(p) }
        r.register(FulfillmentOfferEligibility.self) { p, _ in try await self.offerEligibility(p) }
        r.register(FulfillmentSignOffer.self) { p, _ in try await self.signOffer(p) }
        r.register(FulfillmentRevokeTransaction.self) { p, _ in
            try await self.revokeTransaction(p)
            return EmptyResult()
        }
        return r
    }
}
