import IAPProtocol
import JSONRPC
import RPCTransport

extension FulfillmentService {
    /// The `fulfillment.*` methods of the contract, each answered by the part of fulfillment whose job it is.
    public func router() -> RPCRouter {
        var r = RPCRouter()
        r.register(FulfillmentRedeem.self) { p, _ in try await self.redeem(p, mode: .redeem) }
        r.register(FulfillmentRestore.self) { p, _ in try await self.redeem(p, mode: .restore) }
        r.register(FulfillmentGetEntitlements.self) { p, _ in try await self.entitlements(p) }
        r.register(FulfillmentGetBalance.self) { p, _ in try await self.balance(p) }
        r.register(FulfillmentSpendCoins.self) { p, _ in try await self.spend(p) }
        r.register(FulfillmentListLedger.self) { p, _ in try await self.ledger(p) }
        r.register(FulfillmentListContent.self) { p, _ in try await self.contentDesk.listContent(p) }
        r.register(FulfillmentReadContent.self) { p, _ in try await self.contentDesk.readContent(p) }
        r.register(FulfillmentContentURL.self) { p, _ in try await self.contentDesk.contentURL(p) }
        r.register(FulfillmentApplyNotification.self) { p, _ in try await self.notifications.applyNotification(p) }
        r.register(FulfillmentReceiveNotification.self) { p, _ in try await self.notifications.receiveNotification(p) }
        r.register(FulfillmentReceivePlayNotification.self) { p, _ in try await self.playNotifications.receive(p) }
        r.register(FulfillmentListNotifications.self) { p, _ in try await self.notifications.listNotifications(p) }
        r.register(FulfillmentListOutbox.self) { p, _ in try await self.outbox.listOutbox(p) }
        r.register(FulfillmentRetryNotification.self) { p, _ in try await self.notifications.retryNotification(p) }
        r.register(FulfillmentLookUpOrder.self) { p, _ in try await self.support.lookUpOrder(p) }
        r.register(FulfillmentListAudit.self) { p, _ in try await self.support.listAudit(p) }
        r.register(FulfillmentGrantOrder.self) { p, _ in try await self.support.grantOrder(p) }
        r.register(FulfillmentExtendSubscription.self) { p, _ in try await self.support.extendSubscription(p) }
        r.register(FulfillmentReconcile.self) { p, _ in try await self.support.reconcile(p) }
        r.register(FulfillmentExtendAllSubscriptions.self) { p, _ in try await self.support.extendAllSubscriptions(p) }
        r.register(FulfillmentMassExtensionStatus.self) { p, _ in try await self.support.massExtensionStatus(p) }
        r.register(FulfillmentOfferEligibility.self) { p, _ in try await self.offers.offerEligibility(p) }
        r.register(FulfillmentSignOffer.self) { p, _ in try await self.offers.signOffer(p) }
        r.register(FulfillmentListEvents.self) { p, _ in try await self.events.listEvents(p) }
        r.register(FulfillmentAddWebhook.self) { p, _ in try await self.events.addWebhook(p) }
        r.register(FulfillmentRotateWebhookSecret.self) { p, _ in try await self.events.rotateWebhookSecret(p) }
        r.register(FulfillmentListWebhooks.self) { p, _ in try await self.events.listWebhooks(p) }
        r.register(FulfillmentPauseWebhook.self) { p, _ in try await self.events.pauseWebhook(p) }
        r.register(FulfillmentDeleteWebhook.self) { p, _ in try await self.events.deleteWebhook(p) }
        r.register(FulfillmentRedeliverWebhook.self) { p, _ in try await self.events.redeliverWebhook(p) }
        r.register(FulfillmentListDeliveries.self) { p, _ in try await self.events.listDeliveries(p) }
        r.register(FulfillmentGetCustomer.self) { p, _ in try await self.customers.getCustomer(p) }
        r.register(FulfillmentAdjustCoins.self) { p, _ in try await self.customers.adjustCoins(p) }
        r.register(FulfillmentRetentionMessage.self) { p, _ in try await self.retention.retentionMessage(p) }
        r.register(FulfillmentGetOverview.self) { p, _ in try await self.customers.getOverview(p) }
        r.register(FulfillmentSignOutCustomer.self) { p, _ in try await self.customers.signOutCustomer(p) }
        r.register(FulfillmentDismissNotification.self) { p, _ in try await self.customers.dismissNotification(p) }
        r.register(FulfillmentRevokeTransaction.self) { p, _ in
            try await self.notifications.revokeTransaction(p)
            return EmptyResult()
        }
        return r
    }
}
